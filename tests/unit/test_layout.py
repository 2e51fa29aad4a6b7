"""The code's shape: modules, classes and functions a reader can hold in mind, a CLI that only
parses and renders, no import cycle, and a library that leaves its caller's process alone.

The one-way layers themselves are an import-linter contract (pyproject.toml, `lint-imports`).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "simindex"
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 600
MAX_FUNCTION_LINES = 100
MAX_COMMAND_BODY_LINES = 40


def _modules() -> tuple[dict[str, ast.Module], dict[str, int]]:
    trees, lines = {}, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(("simindex", *path.relative_to(PACKAGE).with_suffix("").parts))
        name = name.removesuffix(".__init__")
        text = path.read_text()
        trees[name], lines[name] = ast.parse(text, str(path)), len(text.splitlines())
    return trees, lines


MODULES, MODULE_LINES = _modules()


def _span(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1  # type: ignore[attr-defined]


def test_no_module_class_or_function_is_too_long():
    too_long = []
    for name, tree in MODULES.items():
        if MODULE_LINES[name] > MAX_MODULE_LINES:
            too_long.append(f"module {name}: {MODULE_LINES[name]} lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _span(node) > MAX_CLASS_LINES:
                too_long.append(f"class {name}.{node.name}: {_span(node)} lines")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if _span(node) > MAX_FUNCTION_LINES:
                    too_long.append(f"function {name}.{node.name}: {_span(node)} lines")
    assert not too_long, "\n".join(too_long)


def _is_command(function: ast.FunctionDef) -> bool:
    """Decorated with ``@<typer app>.command(...)`` or ``@command(app, ...)``."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "command":
            return True
        if isinstance(target, ast.Name) and target.id == "command":
            return True
    return False


def test_every_cli_command_is_a_short_body_over_one_library_call():
    commands, too_long = 0, []
    for name, tree in MODULES.items():
        if not (name == "simindex.cli" or name.startswith("simindex.cli.")):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and _is_command(node):
                commands += 1
                body = node.body
                if ast.get_docstring(node) is not None:
                    body = body[1:]
                lines = body[-1].end_lineno - body[0].lineno + 1 if body else 0
                if lines > MAX_COMMAND_BODY_LINES:
                    too_long.append(f"{name}.{node.name}: {lines} lines")
    assert commands >= 15, "the CLI's commands were not found"
    assert not too_long, "\n".join(too_long)


def _type_only(tree: ast.Module) -> set[ast.AST]:
    """The import statements under ``if TYPE_CHECKING:``, which never run."""
    return {
        statement
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for child in node.body
        for statement in ast.walk(child)
    }


def _imports(name: str, tree: ast.Module) -> set[str]:
    """The simindex modules that module ``name`` imports when it runs, anywhere in its body."""
    package = name if name in _packages() else name.rpartition(".")[0]
    found = set()
    type_only = _type_only(tree)
    for node in ast.walk(tree):
        if node in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in MODULES else base)
    return {module for module in found if module in MODULES and module != name}


def _packages() -> set[str]:
    return {n for n in MODULES if (PACKAGE / Path(*n.split(".")[1:]) / "__init__.py").exists()}


def test_no_import_cycle():
    graph = {name: _imports(name, tree) for name, tree in MODULES.items()}
    graph["simindex"] = set()  # the package's lazy public names import on first use only
    cycles = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                cycles.append(" -> ".join([*path[path.index(imported) :], imported]))
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)


def test_no_python_program_is_held_in_a_string_and_run():
    found = []
    for name, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                arguments = [*node.args, *(k.value for k in node.keywords)]
                for argument in arguments:
                    if isinstance(argument, ast.List | ast.Tuple) and any(
                        isinstance(e, ast.Constant) and e.value == "-c" for e in argument.elts
                    ):
                        found.append(f"{name}: line {node.lineno}")
    assert not found, "\n".join(found)


# Imports simindex and uses the library as an ETL job would, then prints what of the
# process's environment and collector it can see.
_GUEST = """
import gc, json, os, sys
before = (dict(os.environ), gc.get_threshold(), gc.isenabled(), gc.get_freeze_count())
import simindex
from simindex import Index
with Index.create(sys.argv[1]) as index:
    index.add([("a", "a few words of one document"), ("b", "a few words of one document!")])
    index.find_pairs()
    pairs = list(index.pairs())
after = (dict(os.environ), gc.get_threshold(), gc.isenabled(), gc.get_freeze_count())
changed = sorted(k for k in set(before[0]) | set(after[0]) if before[0].get(k) != after[0].get(k))
print(json.dumps({"environ": changed, "collector": [list(map(str, before[1:])), list(map(str, after[1:]))], "pairs": len(pairs)}))
"""


def test_the_library_leaves_its_callers_process_alone(tmp_path):
    # A small environment of its own: this test process has imported simindex already.
    passed = ("PATH", "HOME", "PYTHONPATH", "NUMBA_CACHE_DIR", "TMPDIR")
    environment = {key: os.environ[key] for key in passed if key in os.environ}
    result = subprocess.run(
        [sys.executable, "-c", _GUEST, f"sqlite:///{tmp_path / 'guest.db'}"],
        capture_output=True,
        text=True,
        timeout=600,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["pairs"] == 1
    assert seen["environ"] == []
    before, after = seen["collector"]
    assert before == after
