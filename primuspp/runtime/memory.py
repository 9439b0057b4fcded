"""Activation accounting with `torch.autograd.graph.saved_tensors_hooks`, and OFFLOAD/RELOAD.

Every tensor autograd saves during a forward the runner wraps is packed into a `_Saved` handle; the meter
counts the bytes of each distinct storage while at least one handle refers to it (views and tensors saved
twice count once), on the device or on the host. A handle dies when autograd frees the saved variable
(after the backward that used it), or when the weight-grad store that holds it has run. Parameters (and
anything else passed as `exclude`) are not activations and are not counted.

OFFLOAD moves a (microbatch, stage)'s saved tensors to the host, RELOAD brings them back:
- `copy` mode (default on CUDA): real copies, `to("cpu")` into pinned memory, back with `non_blocking`;
  on CPU it makes a copy (clone) to exercise the same path;
- `account` mode (default on CPU): the tensors stay put, only the accounting moves them to the host.
Host bytes are tracked apart (`host_current`); `current`/`peak` are device-resident bytes.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch


class _Saved:
    """One saved tensor; releases its bytes from the meter when autograd (or a store) drops it."""

    __slots__ = ("__weakref__", "host", "key", "meter", "nbytes", "tensor")

    def __init__(self, tensor: torch.Tensor, meter: ActivationMeter, key: int, nbytes: int) -> None:
        self.tensor = tensor
        self.meter = meter
        self.key = key
        self.nbytes = nbytes
        self.host = False

    def __del__(self) -> None:
        self.meter._release(self.key, self.host)


class SavedRecord:
    """The handles saved during one (microbatch, stage) forward (weakly held: autograd owns them)."""

    __slots__ = ("handles", "offloaded")

    def __init__(self) -> None:
        self.handles: list[weakref.ref[_Saved]] = []
        self.offloaded = False

    def live(self) -> list[_Saved]:
        return [h for ref in self.handles if (h := ref()) is not None]


_push_hooks = torch._C._autograd._push_saved_tensors_default_hooks


def _unpack(packed: Any) -> torch.Tensor:
    return packed.tensor if type(packed) is _Saved else packed


class ActivationMeter:
    """Bytes of saved activations alive on one rank: `current`, `peak`, `host_current`."""

    def __init__(self, exclude: Iterable[torch.Tensor] = (), offload_mode: str | None = None) -> None:
        self.set_exclude(exclude)
        self._entries: dict[int, list[int]] = {}  # device storage ptr -> [nbytes, handles]
        self._host_entries: dict[int, list[int]] = {}  # the same for storages counted on the host
        self._lock = threading.Lock()
        self.current = 0
        self.peak = 0
        self.host_current = 0
        if offload_mode not in (None, "copy", "account"):
            raise ValueError(f"offload_mode must be 'copy' or 'account', not {offload_mode!r}")
        self.offload_mode = offload_mode

    def set_exclude(self, tensors: Iterable[torch.Tensor]) -> None:
        """Storages never counted (parameters): call again if they move (e.g. `module.to(device)`)."""
        self._exclude = {t.untyped_storage().data_ptr() for t in tensors}

    def reset_peak(self) -> None:
        self.peak = self.current

    # -- packing ----------------------------------------------------------------------------------------

    def begin_saving(self, record: SavedRecord) -> None:
        """Count autograd's saved tensors into `record` until `end_saving()` (call it after the forward, also
        when it raised; no context-manager object: once per F node)."""
        _push_hooks(self._packer(record), _unpack)

    end_saving = staticmethod(torch._C._autograd._pop_saved_tensors_default_hooks)

    def _packer(self, record: SavedRecord) -> Callable[[torch.Tensor], Any]:
        """The pack hook of one record: each saved tensor counted (`_track`) and kept (weakly)."""
        append, track, ref = record.handles.append, self._track, weakref.ref

        def pack(tensor: torch.Tensor) -> Any:
            handle = track(tensor)
            if handle is None:
                return tensor
            append(ref(handle))
            return handle

        return pack

    def _track(self, tensor: torch.Tensor) -> _Saved | None:
        try:
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            nbytes = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # tensors without a plain storage
            return None
        if key == 0 or key in self._exclude:
            return None
        handle = _Saved(tensor, self, key, nbytes)
        self._acquire(key, nbytes)
        return handle

    def hold(self, tensors: Iterable[torch.Tensor]) -> list[_Saved]:
        """Count `tensors` while the returned handles are alive (the weight-grad store keeps them)."""
        return [h for t in tensors if (h := self._track(t)) is not None]

    # -- counting: an entry exists while handles refer to the storage (device and host apart) ---------

    def _acquire(self, key: int, nbytes: int, host: bool = False) -> None:
        entries = self._host_entries if host else self._entries
        with self._lock:
            entry = entries.get(key)
            if entry is not None:
                entry[1] += 1
                return
            entries[key] = [nbytes, 1]
            if host:
                self.host_current += nbytes
            else:
                self.current += nbytes
                if self.current > self.peak:
                    self.peak = self.current

    def _release(self, key: int, host: bool = False) -> None:
        entries = self._host_entries if host else self._entries
        with self._lock:
            entry = entries.get(key)
            if entry is None:  # only at interpreter shutdown
                return
            entry[1] -= 1
            if entry[1] == 0:
                del entries[key]
                if host:
                    self.host_current -= entry[0]
                else:
                    self.current -= entry[0]

    # -- OFFLOAD / RELOAD ---------------------------------------------------------------------------------

    def _mode(self, device: torch.device) -> str:
        return self.offload_mode or ("account" if device.type == "cpu" else "copy")

    def offload(self, record: SavedRecord, device: torch.device) -> None:
        """Move the record's saved tensors to the host (or, in `account` mode, only count them there)."""
        copy = self._mode(device) == "copy"
        with torch.no_grad():
            for handle in record.live():
                if handle.host:
                    continue
                self._release(handle.key)
                if copy:
                    tensor = handle.tensor.detach()
                    if tensor.device.type == "cpu":
                        host = tensor.clone()
                    else:
                        host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=True)
                        host.copy_(tensor, non_blocking=True)
                    handle.tensor = host
                    storage = host.untyped_storage()
                    handle.key, handle.nbytes = storage.data_ptr(), storage.nbytes()
                handle.host = True
                self._acquire(handle.key, handle.nbytes, host=True)
        record.offloaded = True

    def reload(self, record: SavedRecord, device: torch.device) -> None:
        """Bring the record's saved tensors back to `device`."""
        copy = self._mode(device) == "copy"
        with torch.no_grad():
            for handle in record.live():
                if not handle.host:
                    continue
                self._release(handle.key, host=True)
                if copy:
                    tensor = handle.tensor.to(device, non_blocking=True)
                    if tensor is handle.tensor:  # CPU run: a distinct copy, as a device would get
                        tensor = tensor.clone()
                    handle.tensor = tensor
                    storage = tensor.untyped_storage()
                    handle.key, handle.nbytes = storage.data_ptr(), storage.nbytes()
                handle.host = False
                self._acquire(handle.key, handle.nbytes)
        record.offloaded = False
