"""Loading the library and the error channel."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mla
from mla import errors


def test_loads_and_reports_version():
    assert mla.version() == mla.__version__
    assert Path(mla.library_path()).is_file()
    assert isinstance(mla.built_with_cuda(), bool)


def test_error_classes_mirror_errc_and_builtin_kinds():
    assert issubclass(mla.ShapeError, ValueError)
    assert issubclass(mla.DTypeError, TypeError)
    assert issubclass(mla.OutOfRangeError, IndexError)
    assert issubclass(mla.UnsupportedError, NotImplementedError)
    assert issubclass(mla.CudaError, RuntimeError)
    codes = sorted(errors.BY_CODE)
    assert codes == list(range(1, 11)) + [100]
    # The names match the C library's status names (mla_status_name).
    from mla._lib import lib

    for code, cls in errors.BY_CODE.items():
        assert lib()._dll.mla_status_name(code).decode() == cls.code_name


def test_error_message_is_per_call_and_verbatim():
    cache = mla.empty_kv_cache(2, 16, "bf16")
    bad = np.zeros((3, 500), np.float32)
    with pytest.raises(mla.ShapeError) as e:
        mla.append_kv(bad, np.zeros((3, 64), np.float32), np.arange(3), cache)
    msg = str(e.value)
    assert "c_kv" in msg and "500" in msg, msg
    # A later successful call does not raise with a stale message.
    mla.append_kv(np.ones((3, 512), np.float32), np.ones((3, 64), np.float32),
                  np.arange(3, dtype=np.int64), cache)


def test_missing_library_raises_import_error_naming_the_path(tmp_path):
    env = dict(os.environ, MLA_LIBRARY=str(tmp_path / "nope.so"))
    code = ("import mla\n"
            "try:\n    mla.version()\n"
            "except ImportError as e:\n    print('ERR', e)\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=str(Path(mla.__file__).parent.parent))
    assert "ERR libmla.so not found" in r.stdout and "nope.so" in r.stdout, r.stdout + r.stderr


def test_import_needs_no_framework():
    code = "import sys, mla; mla.version(); print(sorted(m for m in ('torch','cupy','jax') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=str(Path(mla.__file__).parent.parent))
    assert r.stdout.strip() == "[]", r.stdout + r.stderr
