"""README.md: the quick start is two commands, CI runs the second, and the API example runs."""

from __future__ import annotations

import os
import re
import subprocess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _readme() -> str:
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    return f.read()


def _section(title: str) -> str:
  match = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", _readme(), re.M | re.S)
  assert match, f"README.md has no '## {title}' section"
  return match.group(1)


def _blocks(text: str) -> list[tuple[str, str]]:
  """(language, body) of every fenced code block in ``text``."""
  return re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)


def test_quick_start_is_one_block_of_two_commands():
  blocks = _blocks(_section("Quick start"))
  assert len(blocks) == 1, "the Quick start section must hold exactly one code block"
  commands = [line for line in blocks[0][1].splitlines() if line.strip()]
  assert len(commands) == 2, commands
  for command in commands:
    # Each command does its own set-up, so either works on a fresh machine alone.
    assert command.startswith("python3 -m venv .venv && .venv/bin/pip install "), command
  assert "flexor demo" in commands[0]
  assert "pytest" in commands[1]


def test_ci_runs_the_second_quick_start_command():
  commands = [line for line in _blocks(_section("Quick start"))[0][1].splitlines() if line.strip()]
  printed = subprocess.run(["bash", os.path.join(ROOT, ".ci", "run"), "--dry-run"],
                           capture_output=True, text=True, check=True).stdout
  assert printed == commands[1] + "\n"


def test_api_example_runs():
  codes = [code for language, code in _blocks(_section("API")) if language == "python"]
  assert len(codes) == 1, "the API section must hold one python block"
  namespace: dict = {}
  exec(compile(codes[0], "README.md", "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["traj"]["qpos"].shape == (100, namespace["model"].nq)
  assert namespace["batch"].qpos.shape == (256, namespace["model"].nq)
  for name in ("hold", "dqvel", "dmass", "dctrl"):
    assert bool(namespace["jnp"].all(namespace["jnp"].isfinite(namespace[name]))), name
  assert namespace["dparams"]["w"].shape == (6, 2 + 2 + 6)
