"""Where models run: CUDA with fp16 when asked for or available, else CPU float32."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DevicePlan:
    """Where the models run and in which precision."""

    device: torch.device
    dtype: torch.dtype

    @property
    def description(self) -> str:
        return f"{self.device.type} {str(self.dtype).removeprefix('torch.')}"


def plan_device(choice: str) -> DevicePlan:
    """``choice`` is auto, cpu or cuda; asking for cuda where there is none is an error."""
    if choice not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, not {choice!r}")
    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        return DevicePlan(torch.device("cuda"), torch.float16)
    return DevicePlan(torch.device("cpu"), torch.float32)


# torch's own choice (the physical cores), read before anything changes it.
DEFAULT_THREADS = torch.get_num_threads()


def set_threads(threads: int | None) -> None:
    """Intra-op threads for torch on CPU (None: torch's default); call it first thing on
    the thread that runs a model. The count is that thread's own (OpenMP keeps it per
    thread), so each model thread sets its own: a thread that never set it would take
    whatever count another thread set last."""
    torch.set_num_threads(threads or DEFAULT_THREADS)
