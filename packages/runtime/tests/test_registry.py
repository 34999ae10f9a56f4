"""The backend registry: discovery through entry points, priority, PLYGRAD_DEVICE, broken plugins recorded."""

from __future__ import annotations

import pytest
from rt_fakes import PY, PyBackend, fake_plugins

from plygrad.ir import OPSET_VERSION
from plygrad.runtime import BackendDescriptor, BackendError, BackendStatus, Device
from plygrad.runtime.discovery import BACKENDS


def _descriptor(name: str, priority: int = 1, factory: str = "rt_fakes:open_py",
                ir: tuple[int, int] = OPSET_VERSION) -> BackendDescriptor:
    return BackendDescriptor(name, priority, ir[0], ir[1], factory)


def test_device_opens_by_name_and_index(fakes: None) -> None:
    backend = Device["PY"]
    assert isinstance(backend, PyBackend) and backend.name == "PY"
    assert Device["py:0"] is backend, "'PY:0' and 'py' are spellings of 'PY'"
    other = Device["PY:1"]
    assert other is not backend and other.name == "PY:1"


def test_unknown_device_lists_known_ones(fakes: None) -> None:
    with pytest.raises(BackendError, match=r"unknown device 'NOPE'.*PY"):
        Device["NOPE"]


def test_malformed_device_name(fakes: None) -> None:
    with pytest.raises(BackendError, match="must look like"):
        Device["PY:x"]


def test_default_is_highest_priority_that_opens() -> None:
    high_broken = _descriptor("BROKEN", priority=300, factory="rt_fakes:open_broken")
    with fake_plugins(BROKEN=high_broken, LOW=_descriptor("LOW", priority=1)):
        assert Device.DEFAULT == "PY"
        assert Device.records()["BROKEN"].status is BackendStatus.OPEN_FAILED
    with fake_plugins(HIGH=_descriptor("HIGH", priority=200)):
        assert Device.DEFAULT == "HIGH"


def test_plygrad_device_overrides_default(fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_DEVICE", "py:2")
    assert Device.DEFAULT == "PY:2"


def test_open_failure_is_recorded_and_raised_with_cause() -> None:
    with fake_plugins(BROKEN=_descriptor("BROKEN", factory="rt_fakes:open_broken")):
        with pytest.raises(BackendError, match=r"libfake\.so: cannot open shared object"):
            Device["BROKEN"]
        record = Device.records()["BROKEN"]
        assert record.status is BackendStatus.OPEN_FAILED and "libfake.so" in record.cause
        with pytest.raises(BackendError, match="unavailable: failed to open: OSError"):
            Device["BROKEN"]
        assert Device["PY"].name == "PY", "a broken backend does not affect the others"


def test_descriptor_import_failure_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    from plygrad.runtime import discovery

    def fail() -> object:
        raise ImportError("No module named 'fakedriver'")

    gone = discovery.Plugin(BACKENDS, "GONE", "fakedriver.descriptor:DESCRIPTOR", fail)
    monkeypatch.setattr(discovery, "_installed_entry_points", lambda group: [gone] if group == BACKENDS else [])
    with fake_plugins():
        record = Device.records()["GONE"]
        assert record.status is BackendStatus.IMPORT_FAILED and "fakedriver" in record.cause
        with pytest.raises(BackendError, match=r"descriptor failed to import.*fakedriver"):
            Device["GONE"]
        assert Device.DEFAULT == "PY", "a plugin that fails to import is skipped"


@pytest.mark.parametrize(("ir", "ok"), [
    (OPSET_VERSION, True),
    ((OPSET_VERSION[0], 0), True),
    ((OPSET_VERSION[0], OPSET_VERSION[1] + 1), False),
    ((OPSET_VERSION[0] + 1, 0), False),
    ((OPSET_VERSION[0] - 1, OPSET_VERSION[1]), False),
])
def test_ir_version_mismatch_is_skipped(ir: tuple[int, int], ok: bool) -> None:
    with fake_plugins(OTHER=_descriptor("OTHER", priority=150, ir=ir)):
        record = Device.records()["OTHER"]
        if ok:
            assert record.usable and Device.DEFAULT == "OTHER"
        else:
            assert record.status is BackendStatus.VERSION_MISMATCH
            assert f"{ir[0]}.{ir[1]}" in record.cause
            with pytest.raises(BackendError, match="IR version mismatch"):
                Device["OTHER"]
            assert Device.DEFAULT == "PY"


def test_entry_point_that_is_not_a_descriptor() -> None:
    with fake_plugins(WRONG=object()):
        assert Device.records()["WRONG"].status is BackendStatus.INVALID


def test_descriptor_name_must_match_entry_point() -> None:
    with fake_plugins(ALIAS=PY):
        assert Device.records()["ALIAS"].status is BackendStatus.INVALID


def test_descriptor_validation() -> None:
    with pytest.raises(BackendError, match="upper-case"):
        _descriptor("cpu")
    with pytest.raises(BackendError, match="module:name"):
        BackendDescriptor("X", 1, 1, 0, "no_colon")


def test_no_backend_at_all_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from plygrad.runtime import discovery

    monkeypatch.setattr(discovery, "_installed_entry_points", lambda group: [])
    Device.reset()
    with pytest.raises(BackendError, match="none is installed; pip install plygrad-cpu"):
        Device.DEFAULT  # noqa: B018


def test_installed_entry_points_are_discovered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real path: importlib.metadata entry points, loaded lazily by name."""
    import importlib.metadata

    from plygrad.runtime import discovery

    ep = importlib.metadata.EntryPoint("PY", "rt_fakes:PY", BACKENDS)
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [ep] if group == BACKENDS else [])
    Device.reset()
    assert discovery.plugins(BACKENDS)["PY"].value == "rt_fakes:PY"
    assert Device["PY"].name == "PY"
