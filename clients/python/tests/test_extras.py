"""Each extra of the package installs what its code and its README example import (issue 29:
``pip install 'ctxstore[langgraph]'`` did not install ``langgraph``, so the README's LangGraph
example failed right after the documented install).

The check reads the installed ``ctxstore``'s own metadata (what pip installs for
``ctxstore[extra]``), follows every requirement through the installed distributions' metadata
(their markers evaluated, their extras followed) and asks, for every module imported by a
README example or by a module of the package, which distribution's files hold it. A module
``ctxstore/<name>.py`` and a README example importing ``ctxstore.<name>`` go with the extra
of that name (``pydantic_ai`` with ``pydantic-ai``; ``langgraph_store.py`` with
``langgraph``), when there is one; everything else with the base install. No network: the
fresh-venv installs behind the README's claims are what ``clients/python/check-extras.sh``
runs.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import PYTHON_CLIENT_DIR

README = PYTHON_CLIENT_DIR / "README.md"
PACKAGE_DIR = PYTHON_CLIENT_DIR / "ctxstore"
NOT_SHIPPED = {"test"}  # the test extra is what the test venv holds, not a feature


def package_extras() -> list[str]:
    """The extras the installed ctxstore declares (canonical names), but ``test``."""
    declared = md.metadata("ctxstore").get_all("Provides-Extra") or []
    return sorted({canonicalize_name(e) for e in declared} - NOT_SHIPPED)


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    environment: dict[str, str] = dict(default_environment())
    return any(
        requirement.marker.evaluate({**environment, "extra": extra}) for extra in {"", *extras}
    )


@cache
def closure(extra: str | None) -> frozenset[str]:
    """The canonical names of every distribution ``pip install 'ctxstore[extra]'`` brings in
    (ctxstore itself included), from the installed distributions' metadata."""
    wanted: dict[str, set[str]] = {"ctxstore": {extra} if extra else set()}
    queue = ["ctxstore"]
    while queue:
        name = queue.pop()
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            pytest.fail(f"{name} is required (by ctxstore's extras) but not installed here")
        for text in requires:
            requirement = Requirement(text)
            if not _applies(requirement, wanted[name]):
                continue
            dependency = canonicalize_name(requirement.name)
            extras = {canonicalize_name(e) for e in requirement.extras}
            if dependency not in wanted or not extras <= wanted[dependency]:
                wanted.setdefault(dependency, set()).update(extras)
                queue.append(dependency)
    return frozenset(wanted)


@cache
def _owners() -> dict[Path, str]:
    """Every installed file and the canonical name of the distribution that installed it."""
    owners: dict[Path, str] = {}
    for dist in md.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        for file in dist.files or []:
            owners[Path(str(dist.locate_file(file))).resolve()] = name
    return owners


def provider(module: str) -> str | None:
    """The distribution that holds ``module`` (None for the standard library)."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top == "__future__":
        return None
    spec = importlib.util.find_spec(module)
    if spec is None:
        pytest.fail(f"{module} is imported but not installed in the test venv")
    paths = [spec.origin] if spec.origin not in (None, "built-in", "frozen") else []
    paths += list(spec.submodule_search_locations or [])
    for path in paths:
        assert path is not None
        owner = _owners().get(Path(path).resolve())
        if owner is not None:
            return owner
        for init in Path(path).glob("__init__.py"):  # a package found by its folder
            owner = _owners().get(init.resolve())
            if owner is not None:
                return owner
    if top == "ctxstore":
        return "ctxstore"
    pytest.fail(f"no installed distribution lists {module} ({paths}) among its files")


def imports(source: str) -> Iterator[str]:
    """The absolute modules ``source`` imports at run time (not under TYPE_CHECKING)."""
    tree = ast.parse(source)
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(child) for inner in node.body for child in ast.walk(inner))
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def extra_of(modules: list[str]) -> str | None:
    """The extra whose ctxstore module is imported, if any (``ctxstore.langgraph``)."""
    for module in modules:
        parts = module.split(".")
        if parts[0] == "ctxstore" and len(parts) > 1:
            name = canonicalize_name(parts[1])
            if name in package_extras():
                return name
    return None


def readme_examples() -> list[tuple[int, str]]:
    """The README's Python blocks: (line number, code)."""
    text = README.read_text()
    return [
        (text.count("\n", 0, match.start()) + 2, match.group(1))
        for match in re.finditer(r"```python\n(.*?)```", text, re.S)
    ]


def _example_params() -> list[object]:
    return [pytest.param(line, code, id=f"README.md:{line}") for line, code in readme_examples()]


def missing(modules: list[str], extra: str | None) -> list[str]:
    """The modules whose distribution ``ctxstore[extra]`` does not install."""
    installed = closure(extra)
    return [
        f"{module} (from {owner})"
        for module in modules
        if (owner := provider(module)) is not None and owner not in installed
    ]


def test_there_are_extras_and_examples_to_check() -> None:
    assert {"langgraph", "agents"} <= set(package_extras())
    found = {extra_of(list(imports(code))) for _, code in readme_examples()}
    assert {None, "langgraph", "agents"} <= found


@pytest.mark.parametrize("line, code", _example_params())
def test_each_readme_example_needs_only_its_extra(line: int, code: str) -> None:
    modules = list(imports(code))
    extra = extra_of(modules)
    gaps = missing(modules, extra)
    install = f"ctxstore[{extra}]" if extra else "ctxstore"
    assert not gaps, f"README.md:{line}: `pip install '{install}'` does not install {gaps}"


def extra_of_module(path: Path) -> str | None:
    """The extra a module of the package goes with: the one it is named after (``langgraph``
    for ``langgraph.py`` and ``langgraph_store.py``), if any."""
    name = canonicalize_name(path.stem)
    for extra in package_extras():
        if name == extra or name.startswith(extra + "-"):
            return extra
    return None


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_each_module_needs_only_its_extra(path: Path) -> None:
    extra = extra_of_module(path)
    gaps = missing(list(imports(path.read_text())), extra)
    install = f"ctxstore[{extra}]" if extra else "ctxstore"
    assert not gaps, f"{path.name}: `pip install '{install}'` does not install {gaps}"


# A model a README example names as "provider:model" (Pydantic AI's `Agent("openai:gpt-4o")`)
# is loaded at run time, not imported, so the import checks above cannot see it (issue 44:
# `pip install 'ctxstore[pydantic-ai]'` lacked the OpenAI provider its example runs). The
# distribution each provider prefix needs:
MODEL_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "google-gla": "google-genai",
    "google-vertex": "google-genai",
    "groq": "groq",
    "mistral": "mistralai",
    "cohere": "cohere",
}


def model_providers(source: str) -> set[str]:
    """The distributions the "provider:model" strings called with in ``source`` need."""
    needed: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            prefix, sep, _ = first.value.partition(":")
            if sep and prefix in MODEL_PROVIDERS:
                needed.add(MODEL_PROVIDERS[prefix])
    return needed


def test_a_model_string_is_seen() -> None:
    assert model_providers('Agent("openai:gpt-4o", instructions="x")') == {"openai"}
    assert model_providers('Client("127.0.0.1:7411")') == set()


@pytest.mark.parametrize("line, code", _example_params())
def test_each_model_a_readme_example_names_comes_with_its_extra(line: int, code: str) -> None:
    extra = extra_of(list(imports(code)))
    lacking = sorted(model_providers(code) - closure(extra))
    install = f"ctxstore[{extra}]" if extra else "ctxstore"
    assert not lacking, f"README.md:{line}: `pip install '{install}'` does not install {lacking}"
