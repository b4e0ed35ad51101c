"""The ``flexor`` command, run in-process through ``flexor.cli.main``."""

from __future__ import annotations

import re

import pytest

from flexor import cli, examples

BAD_MJCF = """<mujoco>
  <worldbody>
    <body>
      <geom type="sphere" size="0.1" colour="red"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_examples_are_listed_and_resolve():
  assert {"arm", "chain20", "creature"} <= set(examples.names())
  assert examples.path("arm.xml") == examples.path("arm")
  with pytest.raises(ValueError, match="arm"):
    examples.path("no_such_model")


def test_info_prints_sizes_tree_and_actuators(capsys):
  assert cli.main(["info"]) == 0
  out = capsys.readouterr().out
  assert "arm.xml" in out
  assert "nq=14  nv=12  nu=3  nactuator=3  na=0  nbody=6  njnt=5  ngeom=5  nsite=2  ntendon=0" in out
  assert re.search(r"contacts: \d+ candidate pairs, \d+ narrow-phase slots, \d+ contact slots "
                   r"\(nconmax -1\), \d+ constraint rows, max_geom_pairs -1", out)
  # The tree is indented by depth, each body with its joints and their types.
  assert "\n    cart  [rail: slide]" in out
  assert "\n      upper_arm  [shoulder: ball]" in out
  assert "\n          hand  [wrist: hinge]" in out
  assert "\n    tool  [tool: free]" in out
  assert re.search(r"elbow: joint elbow\s+gear 10 .*ctrlrange \[-1, 1\]", out)


def test_info_of_a_file(capsys):
  assert cli.main(["info", examples.path("creature")]) == 0
  assert "torso  [root: free]" in capsys.readouterr().out


def test_simulate_small_batch(capsys):
  assert cli.main(["simulate", "--steps", "20", "--batch", "2", "--seed", "3"]) == 0
  captured = capsys.readouterr()
  assert re.search(r"jit compile: \d+\.\d+ s", captured.out)
  assert re.search(r"[\d,]+ env-steps/s", captured.out)
  assert "|qpos|: mean" in captured.out
  assert "NaN: none (all 2 environments finite)" in captured.out
  assert "100%  20/20 steps" in captured.err


def test_mjcf_error_is_one_line_with_file_and_line(tmp_path, capsys):
  bad = tmp_path / "bad.xml"
  bad.write_text(BAD_MJCF)
  for command in (["info", str(bad)], ["simulate", str(bad), "--steps", "2", "--batch", "1"]):
    assert cli.main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"flexor: error: {bad}:4:"), err
    assert "colour" in err
    assert "Traceback" not in err


def test_unknown_model_is_a_clear_error(capsys):
  assert cli.main(["info", "no_such_model"]) == 2
  err = capsys.readouterr().err
  assert "no_such_model" in err and "arm" in err


def test_bad_arguments_exit_2():
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["simulate", "--steps", "7", "--chunk", "2"])
  assert exit_info.value.code == 2
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["simulate", "--batch", "0"])
  assert exit_info.value.code == 2


def test_demo_small(capsys, tmp_path):
  assert cli.main(["demo", "--iterations", "4", "--horizon", "12", "--out", str(tmp_path)]) == 0
  out = capsys.readouterr().out
  assert "loss curve:" in out and re.search(r"loss \S+ -> \S+; final angles", out)
  assert (tmp_path / "flexor_demo.png").stat().st_size > 10_000
  # Frames need MuJoCo and an OpenGL backend; without them the command says why instead.
  assert "frames: " in out
