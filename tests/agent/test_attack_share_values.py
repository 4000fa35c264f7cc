"""Attack: values leak past ``[notebook] share_values = false`` (issue 41 §5).

With values not shared the model reads names and types only: no exception text, no repr,
no key or label of a value, and no type name a notebook made up (``type(secret, ...)``
carries data in its name). The notebook tools' core on a namespace of the user's
(docs/notebook-tools.md#privacy-share_values).
"""
from __future__ import annotations

import pytest

from lily_kernel.tools import notebook_tools
from lily_kernel.tools.notebook_tools import Cell, ErrorInfo, RunResult, ToolError

SECRET = "hunter2-s3cr3t-value"


class Book:
    def __init__(self, ns: dict, error: ErrorInfo | None = None) -> None:
        self.ns, self.error = ns, error

    def namespace(self):
        return self.ns

    def hidden(self):
        return {}

    def cells(self, last):
        return [Cell(1, "x = load()", f"{SECRET}\n")]

    def last_error(self):
        return self.error

    def run(self, code):
        return RunResult(f"{SECRET}\n", self.error)


def made_up_class(base: type = object) -> type:
    # a class whose name is data, as a notebook can make one
    return type(SECRET, (base,), {"__module__": "__main__"})


def test_a_made_up_class_name_is_not_shared_by_list_or_inspect():
    book = Book({"obj": made_up_class()(), "n": 3})
    listed = notebook_tools.list_variables(book, share=False)
    inspected = notebook_tools.inspect_variable(book, "obj", share=False)
    assert SECRET not in listed and SECRET not in inspected
    assert "n: int" in listed  # built-in types are still named


def test_a_class_claiming_a_librarys_module_is_not_named_either():
    fake = type(SECRET, (), {"__module__": "json"})  # json publishes no such class
    assert SECRET not in notebook_tools.list_variables(Book({"o": fake()}), share=False)


def test_an_exception_of_a_made_up_class_is_not_named():
    err = ErrorInfo(1, "boom()", SECRET, f"detail {SECRET}", f"tb {SECRET}")
    book = Book({}, err)
    assert SECRET not in notebook_tools.last_error(book, share=False)
    assert SECRET not in notebook_tools.run_python(book, "boom()", share=False).text


def test_a_built_in_exception_is_still_named_without_its_text():
    err = ErrorInfo(1, "d['k']", "KeyError", f"'{SECRET}'", f"tb {SECRET}",
                    f"d has no column 'k'. Its 1 columns: '{SECRET}'.")  # its columns hint
    text = notebook_tools.last_error(Book({}, err), share=False)
    assert "KeyError" in text and SECRET not in text
    ran = notebook_tools.run_python(Book({}, err), "d['k']", share=False).text
    assert "KeyError" in ran and SECRET not in ran
    assert SECRET in notebook_tools.run_python(Book({}, err), "d['k']", share=True).text


def test_a_tool_failure_names_no_made_up_type():
    cls = made_up_class(Exception)

    def fail() -> str:
        raise cls(SECRET)
    with pytest.raises(ToolError) as caught:
        notebook_tools._guarded("inspect_variable", False, fail)
    assert SECRET not in str(caught.value)


def test_the_keys_and_labels_of_a_value_are_not_shared():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({SECRET: [1, 2]})
    series = pd.Series([1, 2], name=SECRET)
    book = Book({"df": frame, "s": series, "d": {SECRET: 1}})
    for name in ("df", "s", "d"):
        text = notebook_tools.inspect_variable(book, name, share=False)
        assert SECRET not in text, (name, text)
    assert SECRET not in notebook_tools.list_variables(book, share=False)
