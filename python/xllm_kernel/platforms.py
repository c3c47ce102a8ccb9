"""Which device platform this process runs on, probed without creating a device context.

    from xllm_kernel import Platform, PlatformEnum

    if Platform.is_npu():
        import torch_npu          # only where the vendor SDK is installed
    bindings = initialize(device=Platform.current())
"""

from __future__ import annotations

import enum
import functools
import importlib.util

import torch


class PlatformEnum(str, enum.Enum):
    """A device family, spelled as initialize() and KernelSpec.device spell it."""

    CPU = "cpu"
    CUDA = "cuda"
    NPU = "npu"

    def __str__(self) -> str:
        return self.value


class Platform:
    """Probes cached per process: the answer cannot change once a process has started."""

    @staticmethod
    @functools.cache
    def is_npu() -> bool:
        # torch_npu being installed is what makes an Ascend process; importing it is left to the
        # implementation modules, so a definition module stays SDK-free.
        return importlib.util.find_spec("torch_npu") is not None

    @staticmethod
    @functools.cache
    def is_cuda() -> bool:
        # Counts devices (NVML or the driver) without creating a CUDA context.
        return torch.cuda.is_available()

    @staticmethod
    def is_cpu() -> bool:
        return Platform.current() is PlatformEnum.CPU

    @staticmethod
    def current() -> PlatformEnum:
        """The accelerator of this process, or CPU when there is none."""
        if Platform.is_npu():
            return PlatformEnum.NPU
        if Platform.is_cuda():
            return PlatformEnum.CUDA
        return PlatformEnum.CPU

    @staticmethod
    def device_type() -> str:
        return Platform.current().value


def device_name(device: object) -> str:
    """'cpu' | 'cuda' | 'npu' from a PlatformEnum, a torch.device or a string ('cuda:0' -> 'cuda')."""
    if isinstance(device, PlatformEnum):
        return device.value
    if isinstance(device, torch.device):
        return "npu" if device.type == "privateuseone" else device.type
    if isinstance(device, str):
        return device.split(":", 1)[0]
    raise TypeError(f"device: expected 'cpu', 'cuda', 'npu', a PlatformEnum or a torch.device, got {device!r}")
