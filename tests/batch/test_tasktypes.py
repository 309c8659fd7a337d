"""Task types: the registry, built-in param validation, plugins by entry point and dotted path."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from minidb.batch._errors import TaskTypeError
from minidb.batch._tasktypes import (
    DEFAULT_IMPORT_CONNECTIONS,
    DEFAULT_MAX_BAD_ROWS,
    TaskOutcome,
    TaskType,
    TaskTypeRegistry,
)


def test_builtins_are_registered() -> None:
    """csv_import, csv_export and sleep exist by default; csv_import needs an input."""
    registry = TaskTypeRegistry()
    assert registry.names() == ["csv_export", "csv_import", "sleep"]
    assert registry.get("csv_import").needs_input
    assert not registry.get("csv_export").needs_input


@pytest.mark.parametrize("name", ["nope", "", "CSV_IMPORT", None, 3, "x" * 1000])
def test_unknown_type(name: object) -> None:
    """An unknown type is a TaskTypeError (the API answers 422)."""
    with pytest.raises(TaskTypeError):
        TaskTypeRegistry().validate(name, {})


@pytest.mark.parametrize(
    "name, params, expected",
    [
        ("csv_import", {}, {"max_bad_rows": DEFAULT_MAX_BAD_ROWS,
                            "connections": DEFAULT_IMPORT_CONNECTIONS}),
        ("csv_import", {"max_bad_rows": 0, "connections": 1},
         {"max_bad_rows": 0, "connections": 1}),
        ("csv_import", {"max_bad_rows": None},
         {"max_bad_rows": None, "connections": DEFAULT_IMPORT_CONNECTIONS}),
        ("csv_export", {"bucket": "b"}, {"bucket": "b", "neutralize_formulas": True}),
        ("csv_export", {"bucket": "a.b:c/d-e_f", "neutralize_formulas": False},
         {"bucket": "a.b:c/d-e_f", "neutralize_formulas": False}),
        ("sleep", {"seconds": 0}, {"seconds": 0, "fail": None}),
        ("sleep", {"seconds": 1.5, "fail": "retryable"}, {"seconds": 1.5, "fail": "retryable"}),
        ("sleep", {"seconds": 3600, "fail": "permanent"}, {"seconds": 3600, "fail": "permanent"}),
    ],
)
def test_valid_params_are_normalised(name: str, params: dict[str, Any], expected: Any) -> None:
    """Valid params come back with their defaults filled in."""
    assert TaskTypeRegistry().validate(name, params) == expected


@pytest.mark.parametrize(
    "name, params, field",
    [
        ("csv_import", {"max_bad_rows": -1}, "max_bad_rows"),
        ("csv_import", {"max_bad_rows": True}, "max_bad_rows"),
        ("csv_import", {"max_bad_rows": 1.0}, "max_bad_rows"),
        ("csv_import", {"connections": 0}, "connections"),
        ("csv_import", {"connections": 17}, "connections"),
        ("csv_import", {"other": 1}, "other"),
        ("csv_export", {}, "bucket"),
        ("csv_export", {"bucket": ""}, "bucket"),
        ("csv_export", {"bucket": "a b"}, "bucket"),
        ("csv_export", {"bucket": "x" * 65}, "bucket"),
        ("csv_export", {"bucket": "b", "neutralize_formulas": "no"}, "neutralize_formulas"),
        ("sleep", {}, "seconds"),
        ("sleep", {"seconds": -1}, "seconds"),
        ("sleep", {"seconds": 3601}, "seconds"),
        ("sleep", {"seconds": float("nan")}, "seconds"),
        ("sleep", {"seconds": "1"}, "seconds"),
        ("sleep", {"seconds": True}, "seconds"),
        ("sleep", {"seconds": 1, "fail": "sometimes"}, "fail"),
    ],
)
def test_invalid_params_name_the_field(name: str, params: dict[str, Any], field: str) -> None:
    """Invalid params are a TaskTypeError naming the param."""
    with pytest.raises(TaskTypeError) as info:
        TaskTypeRegistry().validate(name, params)
    assert info.value.field == field and info.value.task_type == name


def test_params_must_be_an_object() -> None:
    """A list or a string is not a params object."""
    for params in ([], "x", None):
        with pytest.raises(TaskTypeError):
            TaskTypeRegistry().validate("sleep", params)


async def _run(_context: Any) -> TaskOutcome:
    return TaskOutcome({"ok": True})


CUSTOM = TaskType("custom_thing", lambda p: dict(p), run=_run)


class _EntryPoint:
    def __init__(self, name: str, value: object) -> None:
        self.name = name
        self._value = value

    def load(self) -> object:
        return self._value


def test_entry_points_register_types() -> None:
    """A plugin's entry point loading a TaskType of its name is registered."""
    registry = TaskTypeRegistry()
    assert registry.load_entry_points([_EntryPoint("custom_thing", CUSTOM)]) == ["custom_thing"]
    assert registry.get("custom_thing") is CUSTOM


def test_entry_points_must_load_a_matching_task_type() -> None:
    """An entry point loading something else, or under another name, is refused."""
    with pytest.raises(ValueError):
        TaskTypeRegistry().load_entry_points([_EntryPoint("other", CUSTOM)])
    with pytest.raises(ValueError):
        TaskTypeRegistry().load_entry_points([_EntryPoint("custom_thing", object())])


def test_dotted_path_registers_a_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both module:attribute and module.attribute forms load a TaskType."""
    module = types.ModuleType("batch_plugin_for_tests")
    module.TYPE = CUSTOM  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "batch_plugin_for_tests", module)
    assert TaskTypeRegistry().load_dotted("batch_plugin_for_tests:TYPE") == "custom_thing"
    assert TaskTypeRegistry().load_dotted("batch_plugin_for_tests.TYPE") == "custom_thing"
    with pytest.raises(ValueError):
        TaskTypeRegistry().load_dotted("nodots")


def test_duplicate_names_are_refused_unless_replacing() -> None:
    """Two types of one name are a configuration error; replace=True overrides."""
    registry = TaskTypeRegistry()
    other = TaskType("sleep", lambda p: {})
    with pytest.raises(ValueError):
        registry.register(other)
    registry.register(other, replace=True)
    assert registry.get("sleep") is other


def test_invalid_type_names_are_refused() -> None:
    """Type names follow the record's type grammar."""
    with pytest.raises(ValueError):
        TaskTypeRegistry().register(TaskType("Bad Name", lambda p: {}))


@pytest.mark.parametrize("seconds", [10**400, float("nan"), float("inf"), -1, 3601])
def test_sleep_refuses_out_of_range_seconds_without_overflow(seconds: float) -> None:
    """An integer too large for a float is a TaskTypeError like any out-of-range number."""
    with pytest.raises(TaskTypeError, match="seconds"):
        TaskTypeRegistry().validate("sleep", {"seconds": seconds})
