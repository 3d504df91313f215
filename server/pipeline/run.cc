// Running a compute request, whichever front door decoded it.
#include "server/pipeline/run.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/calls/reactor.h"
#include "server/pipeline/job.h"

namespace tc::server {

namespace {

// What a unary reply adds to its output's bytes, at most (dtype, shape and strides at rank 8,
// field tags and lengths).
constexpr int64_t kReplyFramingBytes = 1024;

// Requests up to this many input bytes run on the gRPC thread on the CPU backend.
constexpr int64_t kInlineBytes = 64 << 10;

// The result's metadata for an output bound for the caller's region (found and checked by
// Prepare); where in the region the output goes.
std::byte* DescribeRegionOutput(const ComputeJob& job, const ComputeSpec& spec,
                                ComputeResult* result) {
  const Region& region = *job.output_region();
  result->SetRegion(job.OutputView(), region.id, spec.output_region_offset);
  return region.base() + spec.output_region_offset;
}

// The output goes into the caller's region (found and checked by Prepare): computed there
// directly where the device reads host memory or the region is the caller's GPU memory (the
// job then runs on that GPU); otherwise on a GPU into device memory, then copied into the
// mapping (directly, with the run, where the region is pinned).
void RunIntoRegion(const ServiceEnv& env, const ComputeSpec& spec, absl::Time deadline,
                   std::shared_ptr<ComputeJob> job, ComputeResult* result,
                   std::shared_ptr<Call> call) {
  std::shared_ptr<Region> region = job->output_region();
  std::byte* dst = DescribeRegionOutput(*job, spec, result);
  if (job->device().host_memory() || region->device() != nullptr) {
    job->Run(dst, [job, call](absl::Status s) { call->Finish(s); });
    return;
  }
  auto out = job->AllocateOutput(deadline);
  if (!out.ok()) {
    call->Finish(out.status());
    return;
  }
  runtime::StoragePtr storage = *out;
  if (region->pin() != nullptr && job->device().Reaches(dst, job->plan().out_storage_bytes)) {
    job->Run(storage->data(), [job, storage, call](absl::Status s) { call->Finish(s); },
             {dst, job->plan().out_storage_bytes, /*pinned=*/true});
    return;
  }
  job->Run(storage->data(), [&env, job, storage, dst, call](absl::Status s) {
    if (!s.ok()) {
      call->Finish(s);
      return;
    }
    // Copying out blocks on the device: not on its completion thread.
    env.pool->Schedule([job, storage, dst, call] {
      call->Finish(
          job->device().Read(job->lane(), *storage, 0, dst, job->plan().out_storage_bytes));
    });
  });
}

absl::Status TooLargeForUnary(const Plan& plan, absl::string_view op, int64_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat("the result of '", op, "' would be ", ShapeToString(plan.out_shape), " ",
                   DTypeName(plan.out_dtype), ", ", plan.out_storage_bytes,
                   " bytes, over this server's limit of ", limit,
                   " bytes for one message; use ComputeStream, or keep the output resident"));
}

// The small-request fast path on a GPU: plans and hands the request to the device from the
// gRPC thread. True when it finished or handed the request over; false where it does not
// apply or the device is busy, with the job it planned in `planned` (its device slot and lane
// given back) for the ordinary path to admit and run without planning again.
bool TrySmallOnDevice(const ServiceEnv& env, grpc::CallbackServerContext* ctx,
                      const ComputeSpec* spec, ComputeResult* result,
                      const std::shared_ptr<Call>& call, std::shared_ptr<ComputeJob>* planned) {
  call->received += spec->inline_bytes();
  // No handles and nothing kept: no identity needed.
  auto prepared = ComputeJob::Prepare(*spec, std::string(), env, DeadlineOf(*ctx),
                                      /*stage_inline=*/false);
  if (!prepared.ok()) {
    call->Finish(prepared.status());
    return true;
  }
  std::shared_ptr<ComputeJob> job = *std::move(prepared);
  job->TimeInto(&call->stages);
  const Plan& plan = job->plan();
  runtime::QuickRuns* quick = job->device().quick_runs();
  if (quick == nullptr || plan.out_storage_bytes + job->input_bytes() > quick->max_small_bytes()) {
    call->received = 0;
    job->Leave();
    *planned = std::move(job);
    return false;
  }
  std::byte* out = result->PrepareOutput(plan);
  std::function<void(absl::Status)> done = [job, call](absl::Status s) { call->Finish(s); };
  if (!job->TryRunSmall(out, done)) {
    // Busy or short of memory: the ordinary path, which may wait.
    result->ClearOutput();
    call->received = 0;
    job->Leave();
    *planned = std::move(job);
    return false;
  }
  call->sent = plan.out_storage_bytes;
  return true;
}

// Every input and the output in the caller's GPU memory, on one device: nothing to copy in or
// out and nothing to allocate, so the request is planned and handed to the device from the
// gRPC thread, as a small inline one is, without a trip through the pool. False (nothing
// finished) where it does not apply.
bool TryOnCallersGpu(const ServiceEnv& env, grpc::CallbackServerContext* ctx,
                     const ComputeSpec* spec, ComputeResult* result, std::shared_ptr<Call> call,
                     const std::string& owner) {
  // (Its regions were found by ResolveRegions.)
  const Region* out_region = spec->found_output_region.get();
  if (out_region == nullptr || out_region->device() == nullptr || spec->plan_only ||
      spec->keep_output_resident) {
    return false;
  }
  for (const InputSpec& in : spec->inputs) {
    if (in.source != InputSource::kRegion || in.found_region == nullptr ||
        in.found_region->device() != out_region->device()) {
      return false;
    }
  }
  auto prepared = ComputeJob::Prepare(*spec, owner, env, DeadlineOf(*ctx),
                                      /*stage_inline=*/false, SessionKey(*ctx, owner));
  if (!prepared.ok()) {
    call->Finish(prepared.status());
    return true;
  }
  std::shared_ptr<ComputeJob> job = *std::move(prepared);
  job->TimeInto(&call->stages);
  std::byte* dst = DescribeRegionOutput(*job, *spec, result);
  std::function<void(absl::Status)> done = [job, call](absl::Status s) { call->Finish(s); };
  if (job->TryRun(dst, done)) return true;
  // It would wait (for a result slot, or a kernel to compile): from the pool, which may.
  env.pool->Schedule(
      [job, dst, done = std::move(done)]() mutable { job->Run(dst, std::move(done)); });
  return true;
}

}  // namespace

void StartCompute(const ServiceEnv& env, grpc::CallbackServerContext* ctx, ComputeSpec* spec,
                  ComputeResult* result, std::shared_ptr<Call> call) {
  // The caller's identity, needed up front where tokens are required, else only where
  // resident tensors or regions are touched; resolved once, here or by the front door.
  std::string owner;
  if (spec->identity) {
    owner = *spec->identity;
  } else if (env.auth->requires_token() || spec->needs_identity()) {
    auto id = env.auth->Identify(*ctx);
    if (!id.ok()) {
      call->Finish(id.status());
      return;
    }
    owner = *std::move(id);
  }
  ResolveRegions(spec, owner, env);
  if (spec->plan_only) {
    call->received += spec->inline_bytes();
    auto planned = ComputeJob::PlanOnly(*spec, owner, env);
    if (planned.ok()) result->DescribeOutput((*planned)->OutputView());
    call->Finish(planned.status());
    return;
  }
  // From here on, a compute request of its model (the model statistics count it).
  call->inference = true;
  if (TryOnCallersGpu(env, ctx, spec, result, call, owner)) return;
  // `spec` and `result` stay valid until Finish. `planned`: the job the small path planned
  // and handed back, its inline inputs still to be staged.
  auto work = [&env, ctx, spec, result, call, owner](std::shared_ptr<ComputeJob> planned) {
    if (ctx->IsCancelled()) {
      call->Finish(absl::CancelledError("cancelled before it ran"));
      return;
    }
    call->received += spec->inline_bytes();
    std::shared_ptr<ComputeJob> job = std::move(planned);
    if (job != nullptr) {
      // Planned by the small path, which gave its device slot back while it waited here.
      if (absl::Status s = job->Admit(*spec, owner, env, DeadlineOf(*ctx), true); !s.ok()) {
        call->Finish(s);
        return;
      }
    } else {
      auto prepared =
          ComputeJob::Prepare(*spec, owner, env, DeadlineOf(*ctx), true, SessionKey(*ctx, owner));
      if (!prepared.ok()) {
        call->Finish(prepared.status());
        return;
      }
      job = *std::move(prepared);
    }
    job->TimeInto(&call->stages);
    const Plan& plan = job->plan();
    if (job->output_region() != nullptr) {
      RunIntoRegion(env, *spec, DeadlineOf(*ctx), job, result, call);
      return;
    }

    if (job->keep_output_resident()) {
      auto out = job->AllocateOutput(DeadlineOf(*ctx));
      if (!out.ok()) {
        call->Finish(out.status());
        return;
      }
      runtime::StoragePtr storage = *out;
      job->Run(storage->data(), [&env, job, storage, owner, result, call](absl::Status s) {
        if (!s.ok()) {
          call->Finish(s);
          return;
        }
        auto r = env.resident->Add(owner, storage, job->OutputView(), job->ttl_seconds());
        if (!r.ok()) {
          call->Finish(r.status());
          return;
        }
        result->SetResident((*r)->view, (*r)->handle);
        call->Finish(absl::OkStatus());
      });
      return;
    }

    // The reply also carries the output's metadata and framing.
    if (plan.out_storage_bytes > env.options.max_message_bytes - kReplyFramingBytes) {
      call->Finish(TooLargeForUnary(plan, spec->label(), env.options.max_message_bytes));
      return;
    }
    if (job->device().host_memory()) {
      // The kernels write straight into the result.
      std::byte* out = result->PrepareOutput(plan);
      call->sent = plan.out_storage_bytes;
      job->Run(out, [job, call](absl::Status s) { call->Finish(s); });
      return;
    }
    auto out = job->AllocateOutput(DeadlineOf(*ctx));
    if (!out.ok()) {
      call->Finish(out.status());
      return;
    }
    runtime::StoragePtr storage = *out;
    if (plan.out_storage_bytes <= job->device().max_read_back()) {
      // Small: the device copies the result into the result as part of the run.
      std::byte* host = result->PrepareOutput(plan);
      call->sent = plan.out_storage_bytes;
      job->Run(storage->data(), [job, storage, call](absl::Status s) { call->Finish(s); },
               {host, plan.out_storage_bytes});
      return;
    }
    std::byte* host = result->PrepareOutput(plan);
    call->sent = plan.out_storage_bytes;
    if (result->output_pinned() && job->device().Reaches(host, plan.out_storage_bytes)) {
      // Pinned: the device copies the result straight into the result as part of the run.
      job->Run(storage->data(), [job, storage, call](absl::Status s) { call->Finish(s); },
               {host, plan.out_storage_bytes, /*pinned=*/true});
      return;
    }
    job->Run(storage->data(), [&env, job, storage, host, call](absl::Status s) {
      if (!s.ok()) {
        call->Finish(s);
        return;
      }
      // Copying out blocks on the device: not on its completion thread.
      env.pool->Schedule([job, storage, host, call] {
        call->Finish(
            job->device().Read(job->lane(), *storage, 0, host, job->plan().out_storage_bytes));
      });
    });
  };
  // A small request takes a few microseconds to compute on the host, or to hand to a GPU
  // without waiting for it: it starts right here rather than paying for a trip through the
  // pool. Everything else (large copies, large computations) goes to the pool.
  // (Every device of a server is of one kind.)
  std::shared_ptr<ComputeJob> planned;
  if (spec->inline_bytes() <= kInlineBytes && spec->inline_only()) {
    if (env.devices->at(0).host_memory()) {
      work(nullptr);
      return;
    }
    if (TrySmallOnDevice(env, ctx, spec, result, call, &planned)) return;
  }
  env.pool->Schedule([work = std::move(work), planned = std::move(planned)]() mutable {
    work(std::move(planned));
  });
}

}  // namespace tc::server
