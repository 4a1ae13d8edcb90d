// Describing polyops' values to CANN: where a view sits relative to the
// 32-byte alignment CANN requires, and its aclTensor. Shared by launch.cc
// and descriptors.cc. Not part of launch.h's interface.
#ifndef POLYOPS_ASCEND_RUNTIME_DESCRIPTORS_H_
#define POLYOPS_ASCEND_RUNTIME_DESCRIPTORS_H_

#include <cstdint>

#include "ascend/runtime/cann.h"
#include "core/tensor.h"

namespace polyops::ascend {

struct Placement {
  void* base;      // 32-byte aligned, at or below the view's first element
  int64_t offset;  // the view's first element, in elements from base
};

// `view`'s placement; throws unless its address is a multiple of its
// element size.
Placement Place(const Tensor& view, const char* op);

// CANN's view: dims, strides in elements, an element offset from the
// aligned base, and storage dims spanning the offset plus the view.
AclTensor* CreateTensor(const Runtime& rt, const Tensor& view,
                        const Placement& place, const char* op);

// A CANN object creator's result, or BackendError with CANN's message.
void CheckCreated(const void* object, const char* op, const char* call);

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_RUNTIME_DESCRIPTORS_H_
