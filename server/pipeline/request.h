// A compute request as the pipeline takes it, whichever front door it came through: what to
// run (an op found in the catalog, or an expression), each input's view and where its bytes
// are, and what to do with the output. Each front door decodes its wire message into one
// (DecodeCompute for tensorcompute.v1, ToComputeSpec for KServe v2), checking what the message
// alone can tell: the op and its arity, every view's metadata, the attributes and output
// options, and the server's size limits. ComputeJob::Prepare then checks it against the
// server's state (resident tensors, regions, devices) and plans it, once.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/data/regions.h"
#include "kernels/catalog.h"
#include "kernels/engine.h"
#include "kernels/ops/attributes.h"
#include "kernels/tensor_view.h"
#include "runtime/device.h"

namespace tc::server {

// Where one input's bytes are.
enum class InputSource : uint8_t {
  // In the request (or converted from it): `bytes`.
  kInline,
  // A resident tensor's storage: `handle`.
  kResident,
  // A shared-memory region the caller registered: `region`, from `region_offset`.
  kRegion,
  // Chunks that follow the request (ComputeStream): `storage_bytes` of them.
  kStreamed,
};

struct InputSpec {
  // How messages name it: "input 0" (v1), "input 'INPUT0'" (KServe v2).
  std::string what;
  InputSource source = InputSource::kInline;
  // dtype, shape, strides (elements) and offset, checked for rank, dims and stride count; no
  // data yet. Unset for a whole resident tensor.
  TensorView view;
  // kResident with no view given: the resident tensor's own view.
  bool whole = false;
  // kInline: the storage, in the request or in ComputeSpec::owned (checked against the view
  // when the job is prepared).
  absl::string_view bytes;
  // kInline: `bytes` lie in host memory pinned for the devices (HostBuffers), copied to one
  // without staging.
  bool pinned = false;
  std::string handle;
  // kRegion: the region's id, and the region itself once found (ResolveRegions, or a front
  // door that holds it already): looked up once per request.
  std::string region;
  std::shared_ptr<Region> found_region;
  int64_t region_offset = 0;
  // kRegion and kStreamed: the storage's length.
  int64_t storage_bytes = 0;
};

struct ComputeSpec {
  // The op (its arity checked), or null for `expression` over inputs named `input_names`
  // (DefaultInputNames when empty).
  const CatalogEntry* op = nullptr;
  std::string expression;
  std::vector<std::string> input_names;
  // An op's attributes (an expression carries its own in its text).
  AttrMap attrs;
  OutputOptions output;
  std::vector<InputSpec> inputs;
  bool keep_output_resident = false;
  // Planned and answered with the output's metadata, not run (ComputeRequest.plan_only);
  // kStreamed inputs are then described ones, whose bytes never come.
  bool plan_only = false;
  int64_t resident_ttl_seconds = 0;
  // The caller's region the output goes into (empty: none), from this byte, and the region
  // once found.
  std::string output_region;
  std::shared_ptr<Region> found_output_region;
  int64_t output_region_offset = 0;
  // Where it runs when its inputs on devices do not decide (null: the least loaded device):
  // the device a front door counted the request's host bytes against.
  runtime::Device* device = nullptr;
  // The caller's identity where the front door resolved it already (it had to, before
  // looking at the request): the pipeline then does not resolve it again.
  std::optional<std::string> identity;
  // Bytes the decoding made (converted typed contents, bytes read out of shared memory) that
  // inline inputs point into; a deque, so that they never move.
  std::deque<std::string> owned;

  // What it runs, for metrics and messages: the op's name, or "expression" (the expression's
  // text is the client's and never becomes a label).
  std::string label() const { return op != nullptr ? op->spec.name : "expression"; }
  // Whether it touches resident tensors or regions, which belong to the caller's identity.
  bool needs_identity() const;
  // Bytes of the inline inputs.
  int64_t inline_bytes() const;
  // Every input inline and the output returned in the reply.
  bool inline_only() const;
};

}  // namespace tc::server
