// A compute request's result as the pipeline leaves it, whichever front door encodes it: the
// output's metadata and where the output went (its bytes here, a resident handle, or the
// caller's region). Each front door writes its own reply from it (v1/codec.h, KServe's
// convert.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "grpcpp/support/slice.h"
#include "kernels/planner.h"
#include "kernels/tensor_view.h"
#include "server/pipeline/host_buffers.h"

namespace tc::server {

class ComputeResult {
 public:
  // Outputs this large or larger go into the pool's buffers (Bytes::kBuffer).
  static constexpr int64_t kPooledBytes = int64_t{1} << 20;

  // How the output's bytes are held for the front door that sends them. kString: in a
  // string it takes whole (TakeString; KServe's raw_output_contents). kBuffer: in memory of
  // their own, neither zero-filled first nor copied again, sent as a slice over it
  // (TakeSlice; v1's reply frames them beside its message): with `buffers`, outputs of at
  // least a MiB go into a buffer of the pool, given back once sent.
  enum class Bytes { kString, kBuffer };
  explicit ComputeResult(Bytes bytes, HostBuffers* buffers = nullptr)
      : bytes_(bytes), buffers_(buffers) {}

  // Whether there is an output (none before it is planned, or after a failure).
  bool has_output() const { return has_output_; }
  // Its dtype, shape, strides, offset and storage_bytes (no data).
  const TensorView& output() const { return output_; }
  // Kept resident under this handle, or written into the caller's region `region` from
  // `region_offset`; both empty when the bytes are here.
  const std::string& handle() const { return handle_; }
  const std::string& region() const { return region_; }
  int64_t region_offset() const { return region_offset_; }

  // Where the output stays elsewhere (resident, a region, or only described: plan_only).
  void DescribeOutput(const TensorView& view);
  void SetResident(const TensorView& view, std::string handle);
  void SetRegion(const TensorView& view, std::string region, int64_t offset);
  // The plan's output here: sets the metadata and returns where its plan.out_storage_bytes
  // bytes are to be written (zeroed first where its strides leave gaps).
  std::byte* PrepareOutput(const Plan& plan);
  // Whether PrepareOutput's memory is pinned for the devices (a read-back may go straight
  // into it).
  bool output_pinned() const { return lease_ != nullptr && lease_->pinned(); }
  // Forgets the output, as before it was planned.
  void ClearOutput();

  // Whether the output was returned here (PrepareOutput), its bytes taken or not.
  bool returned() const { return returned_; }
  // Whether the output's bytes are here (PrepareOutput), not yet taken.
  bool has_bytes() const { return has_bytes_; }
  int64_t byte_size() const { return has_bytes_ ? static_cast<int64_t>(size_) : 0; }
  // The bytes, without taking them (for a front door that copies them elsewhere).
  const std::byte* bytes() const;
  // kString: the bytes, moved out.
  std::string TakeString();
  // kBuffer: a slice that owns the bytes (given back to the pool, or freed, once gRPC is done
  // with it).
  grpc::Slice TakeSlice();

 private:
  void Reset();

  Bytes bytes_;
  HostBuffers* buffers_;
  bool has_output_ = false;
  TensorView output_;
  std::string handle_;
  std::string region_;
  int64_t region_offset_ = 0;
  bool returned_ = false;
  bool has_bytes_ = false;
  // The bytes: a string (kString), or a buffer of the pool or memory of their own (kBuffer).
  std::string string_;
  HostBuffers::Lease lease_;
  std::unique_ptr<std::byte[]> data_;
  size_t size_ = 0;
};

}  // namespace tc::server
