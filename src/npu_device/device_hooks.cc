// How torch sees the npu test device: its DeviceGuardImpl (current device
// and streams, for DeviceGuard and torch.Stream) and its PrivateUse1 hooks
// (availability, device switching, pinned memory, storage resizing). Both
// only forward to runtime.h.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstddef>

#include "npu_device/runtime.h"
#include "npu_device/runtime_internal.h"

namespace polyops::npu {
namespace {

class NpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device old = getDevice();
    if (device.index() != old.index()) setDevice(device);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1, CurrentDevice());
  }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.is_privateuseone(), "npu: expected an npu device, got ",
                device);
    SetDevice(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    // Used when a DeviceGuard restores the previous device, which was valid
    // when it was saved.
    try {
      SetDevice(device.index());
    } catch (...) {
    }
  }
  c10::Stream getStream(c10::Device device) const override {
    return CurrentStream(device.index());
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getNewStream(c10::Device device,
                           int /*priority*/) const override {
    return NewStream(device.index());
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device,
                                      bool /*high_priority*/) const override {
    return NewStream(device.index());
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    return ExchangeStream(stream);
  }
  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return StreamHandle(stream);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return DeviceCount();
  }
  // There is no aclrtStreamQuery in the contract: waiting makes the answer
  // "done" true.
  bool queryStream(const c10::Stream& stream) const override {
    SynchronizeStream(stream);
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    SynchronizeStream(stream);
  }
  void synchronizeDevice(const c10::DeviceIndex device) const override {
    SynchronizeDevice(device);
  }
  // No caching allocator: a block is freed at once, so there is nothing to
  // record.
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/,
                             const c10::Stream& /*stream*/) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NpuGuardImpl);

// --- hooks -------------------------------------------------------------------

struct NpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return IsInitialized(); }
  bool hasPrimaryContext(c10::DeviceIndex /*device*/) const override {
    return IsInitialized();
  }
  c10::DeviceIndex deviceCount() const override { return DeviceCount(); }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    SetDevice(device);
  }
  c10::DeviceIndex getCurrentDevice() const override { return CurrentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex old = CurrentDevice();
    SetDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    return DeviceOfPointer(data);
  }
  bool isPinnedPtr(const void* /*data*/) const override { return false; }
  // Non-blocking device-to-host copies ask for pinned host memory. The
  // contract has no aclrtMallocHost and every copy is synchronous anyway, so
  // plain host memory serves.
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return c10::GetAllocator(c10::DeviceType::CPU);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t new_bytes) const override {
    ResizeStorageBytes(storage.unsafeGetStorageImpl(), new_bytes);
  }
};

}  // namespace

void RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new NpuHooks()); }

}  // namespace polyops::npu
