"""Settings read the live environment on every read, however it was changed (settings.environ_value reads
os.environ's own mapping of encoded names; these prove it sees every change os.environ makes)."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from plygrad.ir.settings import FlagSetting, FloatSetting, IntSetting, StrSetting, environ_value

NAME = "PLYGRAD_TEST_SETTING_READ"
NUMBER = IntSetting(NAME, 7, "a test setting", 0, 100)
RATE = FloatSetting(NAME, 0.5, "a test setting")
TEXT = StrSetting(NAME, "default", "a test setting")
FLAG = FlagSetting(NAME, "a test setting")


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)


def test_unset_reads_the_default() -> None:
    assert (NUMBER.get(), RATE.get(), TEXT.get(), FLAG.get(), environ_value(NAME)) == (7, 0.5, "default", False, "")


def test_monkeypatch_setenv_is_seen_at_the_next_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, "42")
    assert (NUMBER.get(), RATE.get(), TEXT.get(), FLAG.get()) == (42, 42.0, "42", True)
    monkeypatch.setenv(NAME, "3")
    assert NUMBER.get() == 3
    monkeypatch.delenv(NAME)
    assert NUMBER.get() == 7


def test_assignment_and_deletion_of_os_environ_are_seen() -> None:
    try:
        os.environ[NAME] = " 250 "
        assert (NUMBER.get(), environ_value(NAME)) == (100, " 250 ")  # clamped to `high`, read unstripped
        os.environ[NAME] = "off"
        assert FLAG.get() is False
        os.environ[NAME] = "yes"
        assert FLAG.get() is True
    finally:
        os.environ.pop(NAME, None)
    assert FLAG.get() is False


def test_patch_dict_and_its_restore_are_seen() -> None:
    with mock.patch.dict(os.environ, {NAME: "12"}):
        assert NUMBER.get() == 12
    assert NUMBER.get() == 7
    os.environ[NAME] = "9"
    with mock.patch.dict(os.environ, clear=True):
        assert NUMBER.get() == 7
    assert NUMBER.get() == 9


def test_a_non_ascii_value_reads_back_as_set() -> None:
    with mock.patch.dict(os.environ, {NAME: "caf\u00e9 \u2713"}):
        assert TEXT.get() == "caf\u00e9 \u2713"


def test_an_unparsable_value_still_raises_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, "many")
    with pytest.raises(ValueError, match=NAME):
        NUMBER.get()


def test_a_replaced_os_environ_is_read_through_its_own_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", {NAME: "21"})
    assert (NUMBER.get(), environ_value(NAME)) == (21, "21")
