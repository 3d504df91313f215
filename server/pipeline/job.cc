#include "server/pipeline/job.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/expr/program.h"
#include "server/pipeline/views.h"

namespace tc::server {

namespace {

absl::Status Prefixed(const absl::Status& s, absl::string_view what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// The bytes view `v` reaches, [lo, hi) from its data pointer; {0, 0} when it has no elements.
// (A view with elements was checked by ValidateView to reach only bytes of its storage, so
// none of this overflows; one without is not, so it returns first.)
std::pair<int64_t, int64_t> ReachedSpan(const TensorView& v) {
  for (int64_t dim : v.shape) {
    if (dim == 0) return {0, 0};
  }
  int64_t lo = v.offset, hi = v.offset;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    const int64_t reach = (v.shape[d] - 1) * v.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t item = ItemSize(v.dtype);
  return {lo * item, (hi + 1) * item};
}

}  // namespace

absl::StatusOr<int64_t> CheckSize(absl::Span<const int64_t> shape, absl::string_view what,
                                  const ServiceOptions& o) {
  if (static_cast<int>(shape.size()) > o.max_rank) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", shape.size(),
                                                   " exceeds this server's limit of ", o.max_rank));
  }
  // Zero for an empty tensor, whatever its other dims multiply to.
  auto checked = CheckedNumel(shape);
  if (!checked.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", checked.status().message()));
  const int64_t numel = *checked;
  if (numel > o.max_elements) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": ", numel, " elements exceed this server's limit of ", o.max_elements));
  }
  return numel;
}

// Why a region named by id was not found: where the region socket is off, no such region
// can exist.
static absl::Status RegionMissing(absl::Status not_found, const RegionStore& regions) {
  if (regions.address().empty() && absl::IsNotFound(not_found)) {
    return absl::FailedPreconditionError(
        "shared-memory regions are off on this server (--region_socket=off)");
  }
  return not_found;
}

// The region of id `id`, for `what`: NOT_FOUND (or FAILED_PRECONDITION where regions are
// off) prefixed with `what`.
static absl::StatusOr<std::shared_ptr<Region>> FindRegion(const std::string& id,
                                                          const std::string& owner,
                                                          const ServiceEnv& env,
                                                          absl::string_view what) {
  if (env.regions == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": shared-memory regions are off on this server"));
  }
  auto r = env.regions->Find(owner, id);
  if (!r.ok()) return Prefixed(RegionMissing(r.status(), *env.regions), what);
  return r;
}

void ResolveRegions(ComputeSpec* spec, const std::string& owner, const ServiceEnv& env) {
  if (env.regions == nullptr) return;
  for (InputSpec& in : spec->inputs) {
    if (in.source != InputSource::kRegion || in.found_region != nullptr) continue;
    if (auto r = env.regions->Find(owner, in.region); r.ok()) in.found_region = *std::move(r);
  }
  if (!spec->output_region.empty() && spec->found_output_region == nullptr) {
    if (auto r = env.regions->Find(owner, spec->output_region); r.ok()) {
      spec->found_output_region = *std::move(r);
    }
  }
}

absl::StatusOr<std::pair<TensorView, std::shared_ptr<Region>>> RegionView(const InputSpec& in,
                                                                          const std::string& owner,
                                                                          const ServiceEnv& env) {
  const std::string& what = in.what;
  absl::StatusOr<std::shared_ptr<Region>> r = in.found_region;
  if (in.found_region == nullptr) r = FindRegion(in.region, owner, env, what);
  if (!r.ok()) return r.status();
  TensorView v = in.view;
  v.storage_bytes = in.storage_bytes;
  if (auto s = CheckRegionRange(**r, in.region_offset, v.storage_bytes, ItemSize(v.dtype), what);
      !s.ok()) {
    return s;
  }
  v.data = (*r)->base() + in.region_offset;
  if (auto s = ValidateView(v, what); !s.ok()) return s;
  // GPU memory cannot be read from here: its bool bytes are the caller's to keep 0 or 1 (any
  // other value only changes that caller's result).
  if (v.dtype == DType::kBool && (*r)->device() == nullptr) {
    if (auto s = CheckBoolView(v, what); !s.ok()) return s;
  }
  return std::make_pair(std::move(v), *std::move(r));
}

absl::StatusOr<std::unique_ptr<ComputeJob>> ComputeJob::PlanOnly(const ComputeSpec& spec,
                                                                 const std::string& owner,
                                                                 const ServiceEnv& env) {
  const ServiceOptions& limits = env.options;
  std::unique_ptr<ComputeJob> job(new ComputeJob());
  // The output's region, looked up here unless the spec holds it (its errors come after the
  // inputs').
  absl::StatusOr<std::shared_ptr<Region>> out_region = spec.found_output_region;
  if (!spec.output_region.empty() && spec.found_output_region == nullptr) {
    out_region = FindRegion(spec.output_region, owner, env, "output_region");
  }
  const int n = static_cast<int>(spec.inputs.size());
  job->views_.resize(n);
  job->storages_.resize(n);
  job->received_.assign(n, -1);
  job->resident_.resize(n);
  job->regions_.resize(n);
  job->input_device_.assign(n, nullptr);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const InputSpec& in = spec.inputs[static_cast<size_t>(i)];
    const std::string& what = in.what;
    TensorView& v = job->views_[i];
    switch (in.source) {
      case InputSource::kResident: {
        auto r = env.resident->Find(owner, in.handle);
        if (!r.ok()) return Prefixed(r.status(), what);
        if ((*r)->writers.load() > 0) {
          return absl::FailedPreconditionError(
              absl::StrCat(what, ": an upload into '", in.handle, "' is still in progress"));
        }
        if (in.whole) {
          v = (*r)->view;
        } else {
          // Another view of the same storage, of the same dtype (a reinterpretation could
          // show bool elements other than 0 and 1).
          v = in.view;
          if (v.dtype != (*r)->view.dtype) {
            return absl::InvalidArgumentError(
                absl::StrCat(what, ": a view of a resident tensor keeps its dtype, ",
                             DTypeName((*r)->view.dtype), " (apply op 'cast' to convert it)"));
          }
          v.data = (*r)->storage->data();
          v.storage_bytes = (*r)->storage->bytes();
          if (auto s = ValidateView(v, what); !s.ok()) return s;
        }
        job->input_device_[i] = &(*r)->storage->device();
        job->storages_[i] = (*r)->storage;
        job->resident_[i] = *std::move(r);
        break;
      }
      case InputSource::kRegion: {
        auto view = RegionView(in, owner, env);
        if (!view.ok()) return view.status();
        v = view->first;
        job->input_device_[i] = view->second->device();
        job->regions_[i] = std::move(view->second);
        break;
      }
      case InputSource::kStreamed:
        // (Checked against its storage_bytes when decoded.)
        v = in.view;
        job->received_[i] = 0;
        break;
      case InputSource::kInline: {
        auto view = InlineView(in.view, in.bytes, what, job->owned_);
        if (!view.ok()) return view.status();
        v = *std::move(view);
        break;
      }
    }
    total += v.storage_bytes;
    // Shapes that came in the request were checked against the limits as it was decoded; a
    // whole resident tensor's is its own, checked here.
    if (in.source == InputSource::kResident && in.whole) {
      if (auto s = CheckSize(v.shape, what, limits); !s.ok()) return s.status();
    }
    if (total > limits.max_request_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the request's inputs exceed this server's limit of ",
                       limits.max_request_bytes, " bytes"));
    }
  }
  // Where inputs on devices decide it, the device is known now, and the views of inputs on
  // other devices are made views of the copies they will get there (planned as such).
  {
    runtime::Device* out_device = nullptr;
    // Only its device here; the region is checked below.
    if (out_region.ok() && *out_region != nullptr) out_device = (*out_region)->device();
    if (auto placed = job->PlaceByInputs(out_device); !placed.ok()) return placed;
  }
  // Every view was checked with ValidateView above.
  absl::StatusOr<PreparedOp> prepared;
  if (spec.op == nullptr) {
    prepared = expr::PrepareExpression(spec.expression, spec.input_names, job->views_, spec.output);
  } else {
    // The device's own rule where it is known now, else the one all the devices take.
    const runtime::Device* known = job->device_ != nullptr ? job->device_ : spec.device;
    const TileRule rule = known != nullptr ? known->tile_rule() : env.devices->tile_rule();
    prepared = PrepareValidated(*spec.op, job->views_, spec.attrs, spec.output, rule);
  }
  if (!prepared.ok()) return prepared.status();
  job->prepared_ = *std::move(prepared);
  TensorView out_meta;
  out_meta.shape = job->plan().out_shape;
  if (auto s = CheckSize(out_meta.shape, "the output", limits); !s.ok()) return s.status();
  job->keep_resident_ = spec.keep_output_resident;
  job->ttl_seconds_ = spec.resident_ttl_seconds;
  if (job->keep_resident_) {
    if (auto s = env.resident->CheckQuota(owner, job->plan().out_storage_bytes); !s.ok()) {
      return s;
    }
  }

  // The output's region, checked once here; an output into GPU memory shared by the caller
  // runs where that memory is.
  if (!spec.output_region.empty()) {
    if (job->keep_resident_) {
      return absl::InvalidArgumentError(
          "output_region and keep_output_resident exclude each other: pick one place");
    }
    if (!out_region.ok()) return out_region.status();
    std::shared_ptr<Region>& r = *out_region;
    if (!r->writable) {
      return absl::InvalidArgumentError(
          "output_region: the region is sealed against writing; use it for inputs only");
    }
    const Plan& plan = job->plan();
    if (auto s = CheckRegionRange(*r, spec.output_region_offset, plan.out_storage_bytes,
                                  ItemSize(plan.out_dtype), "output_region");
        !s.ok()) {
      return s;
    }
    job->output_region_ = std::move(r);
  }
  return job;
}

absl::StatusOr<std::unique_ptr<ComputeJob>> ComputeJob::Prepare(
    const ComputeSpec& spec, const std::string& owner, const ServiceEnv& env, absl::Time deadline,
    bool stage_inline, const std::string& session) {
  auto planned = PlanOnly(spec, owner, env);
  if (!planned.ok()) return planned.status();
  std::unique_ptr<ComputeJob> job = *std::move(planned);
  if (absl::Status s = job->Admit(spec, owner, env, deadline, stage_inline, session); !s.ok()) {
    return s;
  }
  return job;
}

void ComputeJob::Leave() {
  lane_.reset();
  admission_ = runtime::Admission();
  // A device chosen as the least loaded is chosen again when the job is admitted again: by
  // then another may be idler, or this one failed.
  if (chosen_on_admit_) device_ = nullptr;
  chosen_on_admit_ = false;
}

absl::Status ComputeJob::Admit(const ComputeSpec& spec, const std::string& owner,
                               const ServiceEnv& env, absl::Time deadline, bool stage_inline,
                               const std::string& session) {
  const ServiceOptions& limits = env.options;
  if (device_ == nullptr) {
    if (keep_resident_) {
      // A kept output goes where this client keeps its tensors.
      auto placed = PlaceResident(*env.devices, *env.resident, owner, session,
                                  plan().out_storage_bytes, std::nullopt);
      if (!placed.ok()) return placed.status();
      device_ = *placed;
    } else {
      device_ = spec.device != nullptr ? spec.device : &env.devices->LeastLoaded();
      chosen_on_admit_ = spec.device == nullptr;
    }
  }
  if (absl::Status h = device_->health(); !h.ok()) return h;
  std::optional<runtime::Admission> admitted = device_->TryAdmit(limits.max_concurrent_per_device);
  if (!admitted) {
    return absl::ResourceExhaustedError(absl::StrCat("device ", device_->info().index,
                                                     " is busy: ", limits.max_concurrent_per_device,
                                                     " requests in flight; retry later"));
  }
  admission_ = *std::move(admitted);
  times_.admitted = absl::Now();
  lane_ = device_->AcquireLane();

  // Inputs that lie on another device: their bytes copied here.
  if (auto copied = CopyFromOtherDevices(deadline); !copied.ok()) return copied;
  if (peer_bytes_ > 0 && env.metrics != nullptr) env.metrics->AddPeerCopy(peer_bytes_);

  absl::Status staged = Stage(spec, deadline, stage_inline);
  times_.staged = absl::Now();
  if (times_sink_ != nullptr) TimeInto(times_sink_);
  return staged;
}

void ComputeJob::TimeInto(StageTimes* sink) {
  times_sink_ = sink;
  sink->admitted = times_.admitted;
  sink->staged = times_.staged;
}

void ComputeJob::StampRun() {
  if (times_sink_ != nullptr) times_sink_->ran = absl::Now();
}

absl::Status ComputeJob::Stage(const ComputeSpec& spec, absl::Time deadline, bool stage_inline) {
  const int n = static_cast<int>(spec.inputs.size());
  // Storage on the device for streamed inputs, and for inline ones where the device cannot
  // read host memory.
  for (int i = 0; i < n; ++i) {
    TensorView& v = views_[i];
    if (storages_[i] != nullptr) continue;  // Resident, or staged already.
    const bool streamed = received_[i] >= 0;
    const bool on_device = regions_[i] != nullptr && regions_[i]->device() != nullptr;
    const bool copy = stage_inline && !streamed && !on_device && !device_->host_memory();
    if (!streamed && !copy) continue;
    auto s = device_->Allocate(v.storage_bytes, false, deadline, lane_.get());
    if (!s.ok()) return s.status();
    if (copy) {
      // A pinned region copies straight from its mapping, an input parsed into pinned memory
      // straight from there; anything else through staging.
      runtime::Device& d = *device_;
      const InputSpec& in = spec.inputs[static_cast<size_t>(i)];
      const bool pinned_host = (regions_[i] != nullptr && regions_[i]->pin() != nullptr) ||
                               (in.source == InputSource::kInline && in.pinned &&
                                reinterpret_cast<const char*>(v.data) == in.bytes.data());
      const bool pinned = pinned_host && d.Reaches(v.data, v.storage_bytes);
      absl::Status w = pinned ? d.WritePinned(*lane_, **s, 0, v.data, v.storage_bytes)
                              : d.Write(*lane_, **s, 0, v.data, v.storage_bytes);
      if (!w.ok()) return w;
    }
    v.data = (*s)->data();
    storages_[i] = *std::move(s);
  }
  return absl::OkStatus();
}

absl::Status ComputeJob::PlaceByInputs(runtime::Device* out_device) {
  // Inputs on devices: one on a failed device is lost with it.
  std::vector<std::pair<runtime::Device*, int64_t>> bytes_on;
  std::vector<std::pair<int64_t, int64_t>> spans(views_.size());
  for (size_t i = 0; i < views_.size(); ++i) {
    runtime::Device* d = input_device_[i];
    if (d == nullptr) continue;
    spans[i] = ReachedSpan(views_[i]);
    const auto [lo, hi] = spans[i];
    // An input without elements reads nothing: it neither fails nor places the request.
    if (hi == lo) continue;
    // A resident tensor is lost with the device that held it, even one that started over.
    const absl::Status h = resident_[i] != nullptr ? resident_[i]->storage->usable() : d->health();
    if (!h.ok()) return absl::Status(h.code(), absl::StrCat("input ", i, ": ", h.message()));
    auto it =
        std::find_if(bytes_on.begin(), bytes_on.end(), [d](const auto& e) { return e.first == d; });
    if (it == bytes_on.end()) it = bytes_on.insert(bytes_on.end(), {d, 0});
    it->second += hi - lo;
  }
  // An output into GPU memory of the caller's runs where that memory is; else the request runs
  // where most of its input bytes are.
  if (out_device != nullptr) {
    device_ = out_device;
  } else if (!bytes_on.empty()) {
    device_ = std::max_element(bytes_on.begin(), bytes_on.end(), [](const auto& a, const auto& b) {
                return a.second < b.second;
              })->first;
  } else {
    return absl::OkStatus();
  }
  copies_.resize(views_.size());
  for (size_t i = 0; i < views_.size(); ++i) {
    runtime::Device* from = input_device_[i];
    if (from == nullptr || from == device_) continue;
    TensorView& v = views_[i];
    const auto [lo, hi] = spans[i];
    if (hi == lo) continue;  // No elements: nothing is read.
    // From here on, a view of the copy: the reached bytes alone, from its start.
    copies_[i] = PeerCopy{from, v.data + lo, hi - lo};
    v.offset -= lo / ItemSize(v.dtype);
    v.storage_bytes = hi - lo;
    v.data = nullptr;
  }
  return absl::OkStatus();
}

absl::Status ComputeJob::CopyFromOtherDevices(absl::Time deadline) {
  for (size_t i = 0; i < copies_.size(); ++i) {
    const PeerCopy& c = copies_[i];
    if (c.from == nullptr) continue;
    // (Checked when placed; it may have failed since, and its error is not this device's.)
    if (absl::Status h = c.from->health(); !h.ok()) {
      return absl::Status(h.code(), absl::StrCat("input ", i, ": ", h.message()));
    }
    auto s = device_->Allocate(c.bytes, false, deadline, lane_.get());
    if (!s.ok()) return s.status();
    if (auto r = device_->CopyFromDevice(*lane_, **s, 0, *c.from, c.src, c.bytes); !r.ok()) {
      return r;
    }
    views_[i].data = (*s)->data();
    storages_[i] = *std::move(s);
    peer_bytes_ += c.bytes;
  }
  // Done before the request goes on: whatever ends it early (an error, a cancelled stream, a
  // result too large) may then let the sources go (a released tensor, an unregistered
  // region) without a copy still reading them.
  return peer_bytes_ > 0 ? device_->Sync(*lane_) : absl::OkStatus();
}

absl::Status ComputeJob::AcceptChunk(int i, int64_t offset, absl::string_view bytes) {
  if (i < 0 || i >= static_cast<int>(views_.size()) || received_[i] < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk for tensor ", i, ", which is not a streamed input of this request"));
  }
  const int64_t have = received_[i];
  if (offset != have) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", i, ": chunk at byte ", offset, " but ", have,
                     " bytes have arrived; send each input's chunks in order, without gaps"));
  }
  const auto len = static_cast<int64_t>(bytes.size());
  runtime::Storage& s = *storages_[i];
  if (len > views_[i].storage_bytes - have) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, ": chunk of ", len,
                                                   " bytes at byte ", have, " overruns its ",
                                                   views_[i].storage_bytes, " bytes"));
  }
  if (views_[i].dtype == DType::kBool) {
    if (reached_.empty()) reached_.resize(views_.size());
    if (have == 0) reached_[i] = ReachedBytes(views_[i]);
    if (auto b =
            CheckBoolBytesReached(bytes.data(), len, reached_[i], absl::StrCat("input ", i), have);
        !b.ok()) {
      return b;
    }
  }
  if (auto w = device_->Write(*lane_, s, have, bytes.data(), len); !w.ok()) return w;
  received_[i] = have + len;
  bytes_received_ += len;
  return absl::OkStatus();
}

absl::Status ComputeJob::CheckComplete() const {
  for (size_t i = 0; i < views_.size(); ++i) {
    if (received_[i] >= 0 && received_[i] != views_[i].storage_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, ": the stream ended after ",
                                                     received_[i], " of its ",
                                                     views_[i].storage_bytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<runtime::StoragePtr> ComputeJob::AllocateOutput(absl::Time deadline) {
  const Plan& p = plan();
  return device_->Allocate(p.out_storage_bytes, p.out_has_gaps, deadline, lane_.get());
}

std::function<void(absl::Status)> ComputeJob::LeavingFirst(std::function<void(absl::Status)> done) {
  return [this, done = std::move(done)](absl::Status s) {
    if (times_sink_ != nullptr) times_sink_->computed = absl::Now();
    admission_ = runtime::Admission();
    done(std::move(s));
  };
}

void ComputeJob::Run(std::byte* out, std::function<void(absl::Status)> done,
                     runtime::Device::ReadBack read_back) {
  StampRun();
  device_->Run(*lane_, prepared_, views_, out, LeavingFirst(std::move(done)), read_back);
}

// Wrapped for good, whether or not it starts here: a caller that then calls Run hands the
// wrapped one on, and giving the slot back twice gives it back once.
bool ComputeJob::TryRun(std::byte* out, std::function<void(absl::Status)>& done) {
  done = LeavingFirst(std::move(done));
  runtime::QuickRuns* quick = device_->quick_runs();
  StampRun();
  return quick != nullptr && quick->TryRun(*lane_, prepared_, views_, out, done);
}

bool ComputeJob::TryRunSmall(std::byte* host_out, std::function<void(absl::Status)>& done) {
  done = LeavingFirst(std::move(done));
  runtime::QuickRuns* quick = device_->quick_runs();
  StampRun();
  return quick != nullptr && quick->TryRunSmall(*lane_, prepared_, views_, host_out, done);
}

int64_t ComputeJob::input_bytes() const {
  int64_t n = 0;
  for (const TensorView& v : views_) n += v.storage_bytes;
  return n;
}

TensorView ComputeJob::OutputView() const {
  TensorView v;
  v.dtype = plan().out_dtype;
  v.shape = plan().out_shape;
  v.strides = plan().out_strides;
  v.offset = 0;
  v.storage_bytes = plan().out_storage_bytes;
  return v;
}

}  // namespace tc::server
