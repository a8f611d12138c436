"""examples/decode_step.py (the README's "Use from Python" example) runs and matches the reference."""

import importlib.util
import pathlib

import numpy as np

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "decode_step.py"


def _load():
    spec = importlib.util.spec_from_file_location("decode_step", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_decode_step_example_cpu():
    res = _load().decode_step("cpu", check=True, verbose=False)
    assert res["out"].shape == (3, 1, 64, 512)
    # every request has more than 512 states except the second (350): it keeps all of them
    assert (res["indices"][1] >= 0).sum() == 350 and (res["indices"][[0, 2]] >= 0).all()
    assert np.isfinite(res["lse"]).all()
