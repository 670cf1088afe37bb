"""The ``danlu`` command lines README.md and docs/*.md show run as written: each names a
command the CLI has, with options that command takes (docs/ray.md named a ``danlu jobs``
there is none of); and every option's ``--help`` says what it is (``danlu sweep ls --limit``
and ``danlu webhook deliveries --limit`` said nothing), the control plane's ``--interval``
with its default, as ``--port`` and ``--policy`` give theirs.

Read from the click command tree, in this process: no command is run."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from danlu.cli.main import app
from danlu.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```")
SEPARATORS = re.compile(r";|&&|\|\|?")
ENV_PREFIX = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+")


def _tree() -> Any:
    """The ``danlu`` command tree (typer's own click: its groups have ``commands``)."""
    return typer.main.get_command(app)


def _lines(text: str) -> Iterator[str]:
    """The lines of fenced blocks, then each inline code span, of a Markdown ``text``."""
    fenced = False
    prose: list[str] = []
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            yield line
        else:
            prose.append(line)
    yield from " ".join(prose).split("`")[1::2]


def _commands(text: str) -> Iterator[str]:
    """Each ``danlu ...`` command of ``text``, a comment cut off and an environment
    assignment before it dropped; a line of several (``a; b``, ``a && b``, ``a | b``) gives
    each."""
    for line in _lines(text):
        for part in SEPARATORS.split(line.split(" #")[0]):
            command = ENV_PREFIX.sub("", part.strip())
            if command.startswith("danlu "):
                yield command


def _words(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError:  # a quote the docs open and close on another line
        words = command.split()
    return [word.strip("[]") for word in words]


def _problems(command: str, root: Any) -> list[str]:
    """What in ``command`` the CLI does not have: a command, or an option of its command."""
    words = _words(command)
    node, path, index = root, ["danlu"], 1
    while hasattr(node, "commands") and index < len(words):
        word = words[index]
        if word.startswith("-"):
            break
        sub = node.commands.get(word)
        if sub is None:
            if not re.fullmatch(r"[a-z][a-z-]*", word):  # a policy's row of output, danlu 95.9ms
                return []
            return [f"no command '{' '.join([*path, word])}'"]
        node, path, index = sub, [*path, word], index + 1
    if hasattr(node, "commands"):
        return []
    options = {"--help"}
    for param in node.params:
        options.update(param.opts)
        options.update(param.secondary_opts)
    problems = []
    for word in words[index:]:
        if word == "--":
            break
        if re.match(r"^--?[A-Za-z]", word) and word.split("=")[0] not in options:
            problems.append(f"'{' '.join(path)}' has no option {word.split('=')[0]}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_documented_command_exists_with_its_options(doc: Path) -> None:
    root = _tree()
    found = {
        f"{command}: {problem}"
        for command in _commands(doc.read_text(encoding="utf-8"))
        for problem in _problems(command, root)
    }
    assert not found, "\n".join(sorted(found))


def test_the_check_sees_a_wrong_command_and_a_wrong_option() -> None:
    """The check itself: a command the CLI lacks and an option its command lacks are found,
    in a fenced block (after an environment variable) and in an inline span."""
    text = "```bash\nDANLU_HOME=/x danlu jobs; danlu ls --jsn\n```\nsee `danlu sim run --nodez 4`\n"
    root = _tree()
    found = [problem for command in _commands(text) for problem in _problems(command, root)]
    assert found == [
        "no command 'danlu jobs'",
        "'danlu ls' has no option --jsn",
        "'danlu sim run' has no option --nodez",
    ]


def _leaves(node: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
    if hasattr(node, "commands"):
        for name, sub in node.commands.items():
            yield from _leaves(sub, [*path, name])
    else:
        yield " ".join(path), node


def test_every_option_says_what_it_is() -> None:
    silent = [
        f"{name} {param.opts[0]}"
        for name, command in _leaves(_tree(), ["danlu"])
        for param in command.params
        if param.param_type_name == "option" and not (param.help or "").strip()
    ]
    assert not silent, silent


@pytest.mark.parametrize("command", ["up", "server"])
def test_the_reconcile_interval_gives_its_default(command: str) -> None:
    leaf = dict(_leaves(_tree(), ["danlu"]))[f"danlu {command}"]
    interval = next(p for p in leaf.params if "--interval" in getattr(p, "opts", ()))
    default = Settings.model_fields["interval"].default
    assert f"(default {default:g})" in (interval.help or ""), interval.help
