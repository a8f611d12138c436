"""The installed package carries every module, including those that import torch (whose tests skip
where torch is missing, as in CI): found by importlib without executing them."""

import importlib.util

import pytest


@pytest.mark.parametrize("name", ["dsattn.torch_ops", "dsattn.compat", "dsattn.compat.deep_gemm",
                                  "dsattn.compat.flash_mla", "dsattn.compat._check", "dsattn.diagnose",
                                  "dsattn.reference", "dsattn.geometry"])
def test_module_is_installed(name):
    assert importlib.util.find_spec(name) is not None, f"{name} is missing from the installed package"
