// A borrowed callable: FunctionRef<R(A...)> refers to the caller's function object instead of copying it, as
// std::function does (which puts a lambda of more than two references on the heap). For callbacks that are called
// only while the call that received them runs (the thread pool's ranges, an MoE layer's expert and read callbacks):
// a forward pass makes thousands of those calls, and none of them then allocates.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace sluice {

template <class Sig>
class FunctionRef;

template <class R, class... A>
class FunctionRef<R(A...)> {
public:
    FunctionRef() = default;  // empty: operator bool is false
    template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
    FunctionRef(F&& f)  // NOLINT: converts from any callable, as std::function does
        : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))), call_([](void* o, A... a) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...);
          }) {}
    R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }
    explicit operator bool() const { return call_ != nullptr; }

private:
    void* obj_ = nullptr;
    R (*call_)(void*, A...) = nullptr;
};

}  // namespace sluice
