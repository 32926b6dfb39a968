"""The package's layers import one way: fl_gym <- envs <- integrations <- baselines, agents <- training."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
LAYERS = {"fl_gym": 0, "envs": 1, "integrations": 2, "baselines": 3, "agents": 3, "training": 4}
PACKAGES = {"fl_gym.envs": "envs", "fl_gym.baselines": "baselines", "fl_gym.agents": "agents",
            "fl_gym.integrations": "integrations", "fl_gym.training": "training"}
GENERIC = ["fl_gym", "envs/base.py", "envs/registry.py", "envs/scenario.py", "envs/presets.py",
           "envs/learning.py",
           "envs/vector.py", "agents", "training/cli.py", "training/compare.py", "training/evaluation.py",
           "training/callbacks.py", "training/runs.py", "training/bench.py", "training/plots.py",
           "training/agent_demo.py", "training/sections.py", "training/trace.py", "training/imitation.py",
           "training/provenance.py"]


def _layer_of(module: str) -> str:
    for prefix, folder in PACKAGES.items():
        if module == prefix or module.startswith(prefix + "."):
            return folder
    return "fl_gym"


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):  # lazy imports inside functions count too
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
    return [m for m in out if m == "fl_gym" or m.startswith("fl_gym.")]


def _files() -> list[Path]:
    return [p for folder in LAYERS for p in (ROOT / folder).rglob("*.py")]


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_flow_one_way(path):
    here = path.relative_to(ROOT).parts[0]
    if path == ROOT / "fl_gym" / "__init__.py":  # importing the package registers the envs
        return
    if path == ROOT / "fl_gym" / "__main__.py":  # python -m fl_gym: the command line, atop every layer
        return
    for module in _imports(path):
        there = _layer_of(module)
        assert there == here or LAYERS[there] < LAYERS[here], f"{path.relative_to(ROOT)} imports {module}"


def test_generic_modules_name_no_family():
    """Families are reached through the registry: generic code names no env id, family or paper symbol."""
    words = re.compile(r"\b(hapfl|hetero|T_d|LiteModel|FLHetero\w*)\b", re.IGNORECASE)  # as `git grep -w -i`
    files = [p for entry in GENERIC for p in ((ROOT / entry).rglob("*.py") if (ROOT / entry).is_dir()
                                               else [ROOT / entry])]
    # the model catalogue
    offenders = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files if p.name != "zoo.py"
                 for m in words.finditer(p.read_text())]
    assert offenders == []


def _setuptools_table() -> dict:
    """pyproject's ``[tool.setuptools]`` (tomllib from Python 3.11; tomli, pytest's dependency, on 3.10)."""
    try:
        import tomllib
    except ModuleNotFoundError:
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_is_listed_for_installation():
    """A sub-package missing from pyproject's list imports in an editable install but not from a wheel."""
    cfg = _setuptools_table()
    listed = set(cfg["packages"])
    for name, folder in cfg["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            package = ".".join([name, *rel.parts])
            assert package in listed, f"{package} ({init.parent}) is missing from pyproject's packages"


def test_the_package_ships_its_type_annotations():
    """PEP 561's marker, installed with the package: without it mypy skips every ``import fl_gym``."""
    cfg = _setuptools_table()
    assert (ROOT / "fl_gym" / "py.typed").is_file() and "py.typed" in cfg["package-data"]["fl_gym"]


def test_the_simulator_and_the_envs_load_no_rl_library():
    import subprocess
    import sys

    code = ("import sys, gymnasium as gym, fl_gym; gym.make('FLAggregate-v0').reset(seed=0); "
            "assert 'stable_baselines3' not in sys.modules, 'SB3 loaded'; "
            "from fl_gym import make_vec; assert 'stable_baselines3' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


PARSE_ONLY = """
import sys
import gymnasium as gym
from fl_gym.training.cli import main

for argv, status in ((["--help"], 0), (["train", "--help"], 0), (["train", "--seed", "x"], 2)):
    try:
        main(argv)
    except SystemExit as stop:
        assert stop.code == status, (argv, stop.code)
    else:
        raise AssertionError(f"{argv} did not exit")
assert main(["train", "FLNope-v0"]) == 2 and main(["compare", "FLNope-v0", "--policies", "fedavg"]) == 2
assert "torch" not in sys.modules, "torch loaded"
gym.make("FLAggregate-v0")
assert "torch" in sys.modules
"""


def test_python_m_fl_gym_is_the_command_line():
    import subprocess
    import sys

    argv = [sys.executable, "-m", "fl_gym", "train", "--seed", "x"]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("fl-gym train: error: argument --seed")


def test_the_command_line_answers_its_arguments_without_torch():
    """``fl-gym --help``, a malformed flag or an unknown env id load no torch (a second of imports)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", PARSE_ONLY], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_submodules_stay_attributes_of_the_package():
    """``import fl_gym; fl_gym.data.SCHEMES`` (the README's) worked while the package imported eagerly."""
    import subprocess
    import sys

    code = ("import sys, fl_gym; assert 'torch' not in sys.modules; "
            "assert fl_gym.data.SCHEMES and fl_gym.engine.SGD and fl_gym.clock.Clock and fl_gym.models.zoo")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("package", ["fl_gym", "fl_gym.data"])
def test_a_lazy_name_is_the_one_type_checkers_read_and_is_listed(package):
    """The names a package imports when first read are those its ``TYPE_CHECKING`` block re-exports."""
    import importlib

    module = importlib.import_module(package)
    path = Path(module.__file__)
    checked = {alias.asname for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.If)
               and ast.unparse(node.test) == "TYPE_CHECKING"
               for stmt in node.body for alias in stmt.names}
    lazy = {name for names in module.LAZY.values() for name in names}
    assert checked == lazy and lazy <= set(module.__all__) and lazy <= set(dir(module))
    for name in sorted(lazy):
        value = getattr(module, name)
        assert getattr(importlib.import_module(value.__module__), name) is value
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'Nope'"):
        _ = module.Nope


def _private_writes(path: Path) -> list[str]:
    """``obj._name = ...`` (or ``obj._name[i] = ...``, ``+=``) where ``obj`` is not ``self`` or ``cls``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign) else []
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Subscript) and isinstance(leaf.ctx, ast.Store):
                    leaf = leaf.value  # obj._name[i] = ...: the attribute itself is only read
                elif not isinstance(getattr(leaf, "ctx", None), ast.Store):
                    continue
                name = leaf.attr if isinstance(leaf, ast.Attribute) else ""
                owner = getattr(getattr(leaf, "value", None), "id", None)
                if name.startswith("_") and not name.startswith("__") and owner not in ("self", "cls"):
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(leaf)}")
    return found


def test_no_module_writes_another_objects_private_attributes():
    """What one object keeps private, only it writes: others go through its public methods."""
    assert [w for path in _files() for w in _private_writes(path)] == []


# torch's own privates that the engine reads: a storage's handle (its reference count) and an aten op
THIRD_PARTY_PRIVATE = {"_cdata", "_adaptive_avg_pool2d_backward"}
NAMED_TUPLE_API = {"_asdict", "_fields", "_replace", "_make"}


def _private_reads(path: Path) -> list[str]:
    """``obj._name`` read where ``obj`` is not ``self``, ``cls`` or a module, and the file has no ``_name``.

    A name the file defines (a method, a class, an attribute it assigns) is read within its own
    module, as a class reads its own instances' state.
    """
    tree = ast.parse(path.read_text())
    modules = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
               if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    own = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    own |= {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)}
    allowed = own | THIRD_PARTY_PRIVATE | NAMED_TUPLE_API
    return [f"{path.name}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
            and node.attr.startswith("_") and not node.attr.startswith("__") and node.attr not in allowed
            and getattr(node.value, "id", None) not in ("self", "cls", *modules)]


def test_no_module_reads_another_modules_private_attributes():
    """What a module keeps private, only it reads: others go through public methods and properties."""
    assert [r for path in _files() for r in _private_reads(path)] == []


def test_the_private_read_check_finds_one(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import torch\n\nclass A:\n    def _mine(self, other):\n"
                      "        return other._mine()\n\n\ndef f(env, row):\n"
                      "    return env._policies, self._ok, torch._C, row._asdict(), env.public\n")
    assert [r.split(": ")[1] for r in _private_reads(sample)] == ["env._policies"]


def test_the_private_write_check_finds_one(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f(env, self):\n    env._round += 1\n    env._seen[0] = 2\n    self._ok = 1\n"
                      "    env.public = env._read\n")
    assert [w.split(": ")[1] for w in _private_writes(sample)] == ["env._round", "env._seen"]
