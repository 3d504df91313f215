#include "kernels/rtc/functors.h"

#include <cstring>
#include <type_traits>

#include "kernels/ops/op_list.h"

namespace tc::rtc {
namespace {

template <typename F>
void MakeInto(const Attrs& attrs, DType result, int* error, void* out) {
  static_assert(std::is_trivially_copyable_v<F> && std::is_standard_layout_v<F>,
                "a functor reaches a generated kernel as its bytes");
  F f = F::Make(MakeArgs{attrs, result});
  if constexpr (kHasErrorFlag<F>) {
    f.error = error;
  } else {
    (void)error;
  }
  std::memcpy(out, &f, sizeof(F));
}

constexpr FunctorInfo kFunctors[] = {
#define TC_FUNCTOR(F) {"tc::" #F, sizeof(F), alignof(F), kHasErrorFlag<F>, &MakeInto<F>},
    TC_FOR_EACH_OP(TC_FUNCTOR)
#undef TC_FUNCTOR
};

}  // namespace

const FunctorInfo& Functor(OpIndex op) { return kFunctors[op]; }

}  // namespace tc::rtc
