"""The docs as a manual: every command, import, file, name and link they show holds in this code.

A renamed flag, a moved function or file, or a changed env argument leaves the page that shows it
wrong without a test failing. These tests read README.md and docs/: each ``fl-gym`` command (in a
shell block or a code span) parses with the CLI's parsers, each fixed policy one names exists with
the parameters given, each bench section, scenario and env id one names exists, each reproduction
passes the checks the command makes before it trains (HAPFL's on the embedded data), each Python
import resolves, each env a Python block builds from literals without a data folder builds, each
file path and ``fl_gym.`` name a code span cites is there, and each relative link arrives; the
README's library snippets run as written.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import fl_gym
from fl_gym.envs.registry import FAMILIES
from fl_gym.training.cli import BENCH_SECTIONS, build_parser, split_list, split_policies
from fl_gym.training.compare import policy_spec
from fl_gym.training.hetero.results import checked_config as checked_hetero
from fl_gym.training.hetero.results import parser as hetero_parser
from fl_gym.training.learning.results import checked_config as checked_learning
from fl_gym.training.learning.results import parser as learning_parser
from fl_gym.training.select.results import checked_config as checked_select
from fl_gym.training.select.results import parser as select_parser

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL = ("bash", "sh", "console", "text")
OPTIONAL = {"ray", "flwr"}  # extras a page may import (fl-gym[ray], fl-gym[flower])
REPRODUCIBLE = sorted(name for name, family in FAMILIES.items() if family.reproduce)
MAKERS = {"gym.make": gym.make, "gym.make_vec": gym.make_vec, "fl_gym.make_vec": fl_gym.make_vec}


def fenced(text: str) -> list[tuple[str, str]]:
    """A Markdown text as ``(language, body)`` runs: each fenced block (``text`` where no language is
    named) and the prose between them (``prose``)."""
    runs, language, body = [], "prose", []
    for line in text.splitlines():
        if line.strip().startswith("```"):
            runs.append((language, "\n".join(body)))
            language, body = (line.strip()[3:].strip() or "text") if language == "prose" else "prose", []
        else:
            body.append(line)
    return [*runs, (language, "\n".join(body))]


def blocks_of(languages: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(page, body)`` of every fenced block in those languages."""
    return [(str(page.relative_to(ROOT)), body) for page in PAGES
            for language, body in fenced(page.read_text()) if language in languages]


def spans() -> list[tuple[str, str]]:
    """``(page, span)`` of every code span of the prose, its line breaks as spaces."""
    return [(page, " ".join(span.split()))
            for page, body in blocks_of(("prose",)) for span in body.split("`")[1::2]]


def commands() -> list[tuple[str, str, bool]]:
    """``(page, command, whole)`` of every ``fl-gym`` command: in a shell block (whole: comments and
    ``ENV=...`` cut) or a code span of the prose (which may name a command without its arguments)."""
    found = []
    for page, body in blocks_of(SHELL):
        for line in body.replace("\\\n", "").splitlines():  # a continued line, joined as the shell joins it
            line = line.split(" #")[0].strip()
            for part in line.replace("&&", ";").replace("|", ";").split(";"):
                if "fl-gym " in part and not part.lstrip().startswith("#"):
                    found.append((page, part[part.index("fl-gym "):].strip(), True))
    return found + [(page, span, False) for page, span in spans() if span.startswith("fl-gym ")]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """What a parser prints (``--version``, an error) kept off the test's output."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        yield


# each family's reproduce command: the parser of its own arguments, and its pre-flight (the run it asks
# for, every flag checked, nothing written)
REPRODUCTIONS = {"hetero": (hetero_parser, checked_hetero), "select": (select_parser, checked_select),
                 **{family: (functools.partial(learning_parser, family),
                             functools.partial(checked_learning, family))
                    for family in ("rates", "aggregate")}}


def family_parser(family: str) -> argparse.ArgumentParser:
    """The parser of ``fl-gym reproduce FAMILY``'s own arguments; a family without one fails the test."""
    assert family in REPRODUCIBLE or family.isupper(), f"reproduce {family}: allowed {REPRODUCIBLE} (or NAME)"
    return REPRODUCTIONS[family][0]() if family in REPRODUCTIONS else learning_parser(family)  # NAME: any


def test_the_docs_show_commands_and_python():
    """A guard on the readers below: they find the blocks (a changed fence would make them see none)."""
    whole = [c for c in commands() if c[2]]
    assert len(whole) > 40 and len(commands()) > len(whole) + 50 and len(blocks_of(("python",))) > 15
    assert len(cited_files()) > 50 and len(cited_names()) > 30 and len(links()) > 50
    assert len(named_policies()) > 30 and len(bench_commands()) > 15 and len(reproductions()) >= 10


@pytest.mark.parametrize("page,command,whole", commands())
def test_every_command_the_docs_show_parses(page, command, whole):
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            args = build_parser().parse_args(shlex.split(command)[1:])
            if args.command == "reproduce":
                family_parser(args.family).parse_args(args.args)
    except SystemExit as stop:  # 0: a --help
        said = errors.getvalue()
        named_only = not whole and "the following arguments are required" in said  # "`fl-gym compare` runs"
        placeholder = re.search(r"invalid \w+ value: '[A-Z_]+'", said)  # --seed S, --target ACC
        assert stop.code in (0, None) or named_only or placeholder, f"{page}: {command}\n{said}"


def cited_files() -> list[tuple[str, str]]:
    """``(page, path)`` of every repository file a code span names (``fl_gym/engine/batcher.py``), not
    the outputs that commands write (``runs/...``)."""
    files = [(page, m.group(1)) for page, span in spans()
             if (m := re.fullmatch(r"([\w./-]+/[\w.-]+\.(?:py|md|sh|yml|json|toml))(?::\d+)?", span))]
    return [(page, path) for page, path in files if not path.startswith(("runs/", "bench-results/"))]


@pytest.mark.parametrize("page,path", cited_files())
def test_every_file_the_docs_cite_is_there(page, path):
    assert (ROOT / path).is_file() or (ROOT / page).parent.joinpath(path).is_file(), f"{page}: {path}"


def cited_names() -> list[tuple[str, str]]:
    """``(page, name)`` of every dotted ``fl_gym`` name a code span gives (``fl_gym.make_vec(...)``)."""
    return [(page, m.group(1)) for page, span in spans()
            if (m := re.fullmatch(r"(fl_gym(?:\.\w+)+)(?:\(.*\))?", span))]


def module_or_none(name: str) -> object:
    """The module ``name``, None where no module has that name (an attribute of one, say)."""
    try:
        return import_optional(name)
    except ModuleNotFoundError as missing:
        if missing.name == name:
            return None
        raise


def import_optional(module: str) -> object:
    """``module``, or the test skipped where it needs an extra that is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as missing:  # an extra, or a part of one (RLlib's own needs), not installed here
        if {module.split(".")[0], (missing.name or "").split(".")[0]} & OPTIONAL:
            pytest.skip(f"{module}: an optional extra, not installed here ({missing})")
        raise


@pytest.mark.parametrize("page,name", cited_names())
def test_every_name_the_docs_cite_resolves(page, name):
    parts = name.split(".")
    depth = len(parts)
    while (found := module_or_none(".".join(parts[:depth]))) is None:  # the longest prefix that is a module
        depth -= 1
    for part in parts[depth:]:
        assert hasattr(found, part), f"{page}: {name} ({part} is not in {found!r})"
        found = getattr(found, part)


def links() -> list[tuple[str, str]]:
    """``(page, target)`` of every relative Markdown link."""
    targets = [(str(page.relative_to(ROOT)), target) for page in PAGES
               for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text())]
    return [(page, target) for page, target in targets if not re.match(r"\w+://|#", target)]


@pytest.mark.parametrize("page,target", links())
def test_every_link_between_the_pages_arrives(page, target):
    assert (ROOT / page).parent.joinpath(target.split("#")[0]).exists(), f"{page}: {target}"


@functools.cache
def parsed_commands() -> list[tuple[str, argparse.Namespace]]:
    """``(page, arguments)`` of every documented command that parses whole (parsed once, for the tests)."""
    parser, parsed = build_parser(), []
    for page, command, _ in commands():
        with contextlib.suppress(SystemExit), quiet():  # a command named without its arguments, or --version
            parsed.append((page, parser.parse_args(shlex.split(command)[1:])))
    return parsed


def named_policies() -> list[tuple[str, str, str]]:
    """``(page, env id, policy)`` of every fixed policy a documented compare, generalise or flower names."""
    found = []
    for page, args in parsed_commands():
        if args.command in ("compare", "generalise", "flower") and not args.env_id.isupper():  # not ENV_ID
            policies = split_policies(args.policy if args.command == "flower" else args.policies)
            found += [(page, args.env_id, p) for p in policies if ":" not in p and p != "..."]  # not a run
    return found


@pytest.mark.parametrize("page,env_id,policy", named_policies())
def test_every_fixed_policy_the_docs_name_is_one_with_those_parameters(page, env_id, policy):
    assert policy_spec(policy, env_id).label, f"{page}: {policy} on {env_id}"


def bench_commands() -> list[tuple[str, argparse.Namespace]]:
    """``(page, arguments)`` of every documented ``fl-gym bench`` command."""
    return [(page, args) for page, args in parsed_commands() if args.command == "bench"]


@pytest.mark.parametrize("page,args",
                         [pytest.param(*c, id=f"{c[0]}: {c[1].sections}") for c in bench_commands()])
def test_every_bench_command_the_docs_show_names_its_sections_and_scenarios(page, args):
    """Checked in the command's body, not by the parser: a renamed section parses as any string."""
    from fl_gym.training.bench import SCENARIOS

    assert set(split_list(args.sections)) <= set(BENCH_SECTIONS), f"{page}: --sections {args.sections}"
    assert set(split_list(args.scenarios)) <= set(SCENARIOS), f"{page}: --scenarios {args.scenarios}"
    ids = split_list(args.vec_ids or "") + split_list(args.memory_envs or "") + [args.ppo_env]
    assert {i for i in ids if not i.isupper()} <= set(gym.registry), f"{page}: {ids}"  # but ID, YOUR-ID


def reproductions() -> list[tuple[str, str]]:
    """``(page, command)`` of every documented ``reproduce`` run whose checks read no data folder.

    HAPFL's checks load its data set, so its MNIST runs are left out; the others read none.
    """
    return [(page, command) for page, command, _ in commands() if command.startswith("fl-gym reproduce ")
            and not shlex.split(command)[2].isupper()
            and not (command.startswith("fl-gym reproduce hetero") and "mnist" in command)]


@pytest.mark.parametrize("page,command", [pytest.param(*r, id=f"{r[0]}: {r[1][17:]}")
                                          for r in reproductions()])
def test_every_reproduction_the_docs_show_passes_its_checks(page, command):
    """All its flags, as the command checks them before the first section or agent runs (hours)."""
    family, *argv = shlex.split(command)[2:]
    assert family in REPRODUCTIONS, f"{page}: {command}: no checks here ({', '.join(REPRODUCTIONS)})"
    with quiet():
        REPRODUCTIONS[family][1](argv)


def cited_reproductions() -> list[tuple[str, str]]:
    """``(command, page)`` of each ``reproduce`` command of the README whose line names the page whose
    numbers it gives (``# the numbers of docs/PAGE.md``)."""
    found = []
    for page, body in blocks_of(SHELL):
        for line in body.splitlines() if page == "README.md" else ():
            cited = re.search(r"#.*the numbers of (docs/\S+\.md)", line)
            for part in line.split(" #")[0].split(";") if cited else ():
                if "fl-gym reproduce " in part:
                    found.append((part.strip(), cited.group(1)))
    return found


def settings(command: str) -> dict[str, Any]:
    """What a ``reproduce`` command runs, as its parser reads it: every flag but where it writes (--out)."""
    family, *argv = shlex.split(command)[2:]
    with quiet():
        args = vars(family_parser(family).parse_args(argv))
    return {"family": family, **{name: value for name, value in args.items() if name != "out"}}


@pytest.mark.parametrize("command,page", cited_reproductions())
def test_a_reproduction_the_readme_lists_runs_what_its_page_ran(command, page):
    """The README listed ``reproduce hetero --dataset mnist`` for docs/hapfl.md, whose numbers come
    from five rounds of one epoch: as listed, it ran a day's budget and gave other numbers."""
    shown = [c for p, c, whole in commands() if p == page and whole and c.startswith("fl-gym reproduce ")]
    assert settings(command) in [settings(c) for c in shown], f"README: {command}; {page} shows {shown}"


def test_every_family_that_reproduces_has_its_parser_and_checks_here():
    assert sorted(REPRODUCTIONS) == REPRODUCIBLE


def imports() -> list[tuple[str, str, tuple[str, ...]]]:
    """``(page, module, names)`` of every import in a Python block (``names`` empty for ``import m``)."""
    found = []
    for page, body in blocks_of(("python",)):
        for node in ast.walk(ast.parse(body)):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.append((page, node.module, tuple(alias.name for alias in node.names)))
            elif isinstance(node, ast.Import):
                found += [(page, alias.name, ()) for alias in node.names]
    return found


@pytest.mark.parametrize("page,module,names",
                         [pytest.param(*i, id=f"{i[0]}: {i[1]} {','.join(i[2])}") for i in imports()])
def test_every_import_the_docs_show_resolves(page, module, names):
    imported = import_optional(module)
    assert [name for name in names if not hasattr(imported, name)] == [], f"{page}: from {module}"


def constructions() -> list[tuple[str, str, str, tuple, dict]]:
    """``(page, call, env id, args, kwargs)`` of every ``gym.make``, ``gym.make_vec`` and
    ``fl_gym.make_vec`` of literals that reads no data folder (``data_root``) or downloaded data set."""
    found = []
    for page, body in blocks_of(("python",)):
        for node in ast.walk(ast.parse(body)):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) in MAKERS):
                continue
            try:
                args = tuple(ast.literal_eval(a) for a in node.args)
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            except ValueError:  # a name, not a literal: the block builds it
                continue
            if "data_root" not in kwargs and kwargs.get("dataset", "digits") == "digits":
                found.append((page, ast.unparse(node.func), args[0], args[1:], kwargs))
    return found


@pytest.mark.parametrize("page,call,env_id,args,kwargs",
                         [pytest.param(*c, id=f"{c[0]}: {c[2]} {c[4]}") for c in constructions()])
def test_every_env_the_docs_build_builds_and_resets(page, call, env_id, args, kwargs):
    env = MAKERS[call](env_id, *args, **kwargs)
    try:
        if call == "fl_gym.make_vec":  # an SB3 VecEnv: the copies' rows, each in the single space
            assert all(env.observation_space.contains(row) for row in env.reset())
        else:
            assert env.observation_space.contains(env.reset(seed=0)[0])
    finally:
        env.close()


def test_readme_snippet_runs_as_written(capsys):
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- library-snippet -->", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    exec(compile(block, "README.md", "exec"), {})
    assert "BalancedOraclePolicy" in capsys.readouterr().out


def test_readme_simulator_snippets_run_as_written(capsys):
    """The federation on its own, then one round in phases (the second block continues the first)."""
    readme = (ROOT / "README.md").read_text()
    first = readme.split("The simulator underneath is usable", 1)[1]
    blocks = [b.split("```", 1)[0] for b in first.split("```python")[1:3]]
    assert blocks[0].startswith("\nfrom fl_gym import Federation") and "fed.finish_round" in blocks[1]
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)
    assert 0 <= scope["report"].accuracy <= 1 and scope["report"].round == 11
    assert not (scope["report"].aggregated & ~scope["opened"].candidates).any()
