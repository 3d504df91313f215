// One compute request resolved onto a device: each input inline (the request's bytes),
// resident (a handle's storage, no copy), in a shared-memory region (the caller's mapping,
// computed on in place by the CPU, copied from directly by a GPU) or streamed (storage the
// chunks fill), checked
// against the limits, planned, and admitted to the device.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/data/regions.h"
#include "server/data/resident.h"
#include "server/env/service_env.h"
#include "server/pipeline/request.h"

namespace tc::server {

// The elements of a tensor of `shape`, within the server's limits, as both front doors check
// them: INVALID_ARGUMENT past the rank limit or for a shape whose count overflows,
// RESOURCE_EXHAUSTED past the element limit; `what` names the tensor in the message.
absl::StatusOr<int64_t> CheckSize(absl::Span<const int64_t> shape, absl::string_view what,
                                  const ServiceOptions& o);

// Finds each region `spec` names (inputs and output) once, among `owner`'s, and keeps it in
// the spec for every later step; one not found is left for Prepare to report.
void ResolveRegions(ComputeSpec* spec, const std::string& owner, const ServiceEnv& env);

// An input whose storage lies in one of `owner`'s regions (found already, or looked up): its view
// (data pointing into the mapping, every element checked to lie inside), and the region, held while
// it is in use.
absl::StatusOr<std::pair<TensorView, std::shared_ptr<Region>>> RegionView(const InputSpec& in,
                                                                          const std::string& owner,
                                                                          const ServiceEnv& env);

class ComputeJob {
 public:
  // `spec` (and the bytes its inline inputs point into) must outlive the job: inline inputs
  // may be computed on in place. Streamed inputs wait for their chunks (AcceptChunk).
  // `stage_inline`: copy inline inputs into device storage where the device cannot read host
  // memory; without it they stay host views, for TryRunSmall.
  // `session`: the caller's SessionKey, which decides where a kept output goes when no
  // input does.
  // Runs where its inputs on devices (resident tensors, GPU regions) mostly are, copying those
  // on other devices there; with none, on the least loaded device.
  // What Prepare does before a device is chosen and admitted: the inputs found and checked,
  // the request planned, the output's region checked; nothing allocated, copied or admitted.
  // A plan_only request is answered from it (OutputView).
  static absl::StatusOr<std::unique_ptr<ComputeJob>> PlanOnly(const ComputeSpec& spec,
                                                              const std::string& owner,
                                                              const ServiceEnv& env);
  static absl::StatusOr<std::unique_ptr<ComputeJob>> Prepare(
      const ComputeSpec& spec, const std::string& owner, const ServiceEnv& env, absl::Time deadline,
      bool stage_inline = true, const std::string& session = std::string());

  // Prepare after PlanOnly: the device chosen (unless the inputs chose it) and admitted, a
  // lane taken, inputs on other devices copied, and inputs staged as Prepare says.
  absl::Status Admit(const ComputeSpec& spec, const std::string& owner, const ServiceEnv& env,
                     absl::Time deadline, bool stage_inline,
                     const std::string& session = std::string());
  // Gives the device slot and the lane back, keeping the plan, for a job of inline inputs
  // alone and no output kept or placed (nothing staged, copied or reserved yet: run.cc's small
  // path) that is to wait before it runs: it is admitted again (Admit) when its turn comes,
  // on the least loaded device of that moment unless its spec names one.
  void Leave();

  // Stage times go to `sink` too (a call's, for the model statistics): admission and staging
  // as stamped so far and from now on, the kernels' start and end around each run. The sink
  // must outlive the job's runs.
  void TimeInto(StageTimes* sink);

  const PreparedOp& prepared() const { return prepared_; }
  const Plan& plan() const { return prepared_.plan; }
  runtime::Device& device() { return *device_; }
  runtime::Lane& lane() { return *lane_; }
  bool keep_output_resident() const { return keep_resident_; }
  // The caller's region the output goes into (ComputeRequest.output_region), checked to hold
  // it; null when there is none.
  const std::shared_ptr<Region>& output_region() const { return output_region_; }
  int64_t ttl_seconds() const { return ttl_seconds_; }

  // A chunk of streamed input `input`: `bytes` at byte `offset` of its storage, in order and
  // inside it. Copied to the device before this returns.
  absl::Status AcceptChunk(int input, int64_t offset, absl::string_view bytes);
  // INVALID_ARGUMENT naming the first streamed input not complete.
  absl::Status CheckComplete() const;
  int64_t bytes_received() const { return bytes_received_; }

  // Device storage for the output (zeroed where its strides leave gaps).
  absl::StatusOr<runtime::StoragePtr> AllocateOutput(absl::Time deadline);
  // Runs into `out` (device memory; host memory on a host device). `done` and `read_back`
  // as Device::Run. The job's slot on the device goes back as the device finishes, before
  // `done` answers: a client that has its answer finds the device idle for its next request.
  // The job lives until `done` has run.
  void Run(std::byte* out, std::function<void(absl::Status)> done,
           runtime::Device::ReadBack read_back = {});

  // QuickRuns::TryRun: Run where it starts at once, without waiting.
  bool TryRun(std::byte* out, std::function<void(absl::Status)>& done);
  // QuickRuns::TryRunSmall over the (host) inline inputs, into `host_out`.
  bool TryRunSmall(std::byte* host_out, std::function<void(absl::Status)>& done);
  // Total input storage bytes.
  int64_t input_bytes() const;

  // The output's metadata: offset 0, plan strides, storage_bytes.
  TensorView OutputView() const;

 private:
  ComputeJob() = default;
  // Before planning: device_ where inputs on devices (or an output region on one) decide it,
  // left null otherwise; the views of inputs on other devices become views of their copies
  // (data set by CopyFromOtherDevices). UNAVAILABLE for an input on a failed device.
  absl::Status PlaceByInputs(runtime::Device* out_device);
  // Once admitted, with a lane: those inputs copied into storage on device_.
  absl::Status CopyFromOtherDevices(absl::Time deadline);
  // Admit's last step: storage on the device for streamed inputs, and (with `stage_inline`)
  // inline ones copied there where the device cannot read host memory. Inputs staged before
  // stay as they are.
  absl::Status Stage(const ComputeSpec& spec, absl::Time deadline, bool stage_inline);
  // `done`, giving the device slot back first.
  std::function<void(absl::Status)> LeavingFirst(std::function<void(absl::Status)> done);

  // Stamps the kernels' start where a sink is set.
  void StampRun();

  PreparedOp prepared_;
  StageTimes times_;
  StageTimes* times_sink_ = nullptr;
  runtime::Device* device_ = nullptr;
  // device_ is the least loaded device when Admit ran, not one the inputs or the spec chose.
  bool chosen_on_admit_ = false;
  runtime::Admission admission_;
  std::unique_ptr<runtime::Lane> lane_;
  std::vector<TensorView> views_;
  // Per input: the storage it lives in on the device (null for inline inputs on a host
  // device), and for streamed ones how many bytes have arrived (-1: not streamed).
  std::vector<runtime::StoragePtr> storages_;
  std::vector<int64_t> received_;
  // Per streamed bool input, the bytes its view reaches (ReachedBytes), made with its first
  // chunk.
  std::vector<std::vector<bool>> reached_;
  // Inline blobs copied for alignment.
  std::vector<std::unique_ptr<std::string>> owned_;
  // Resident inputs, held so a Release during the request cannot free them; regions alike.
  std::vector<std::shared_ptr<ResidentTensor>> resident_;
  std::vector<std::shared_ptr<Region>> regions_;
  // Per input, the device its memory is on (resident tensors, GPU regions); null for host bytes.
  std::vector<runtime::Device*> input_device_;
  // Per input (empty when none): what CopyFromOtherDevices copies to device_.
  struct PeerCopy {
    runtime::Device* from = nullptr;
    const std::byte* src = nullptr;
    int64_t bytes = 0;
  };
  std::vector<PeerCopy> copies_;
  int64_t peer_bytes_ = 0;
  std::shared_ptr<Region> output_region_;
  bool keep_resident_ = false;
  int64_t ttl_seconds_ = 0;
  int64_t bytes_received_ = 0;
};

}  // namespace tc::server
