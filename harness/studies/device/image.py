"""What a GPU lease's machine holds, and an environment here that holds only that.

The machine (``nvidia-h200``: one H200, 16 CPU cores, no network) runs Python 3.12 with torch
2.11 (CUDA 13) and the packages of :data:`IMAGE_PACKAGES`, as the workplace's notes listed them
on 2026-11-17. It has no polars, MLflow, Ray or pydantic and cannot fetch any: what the
harness needs beyond the image travels as wheels (:data:`KIT_WHEELS`, gathered by
``harness device kit``: :mod:`harness.studies.device.kit`).

Which of those the device path needs was decided by measurement: the training core imports
polars, MLflow and Ray only where it uses them (tables, tracking, studies), and pydantic is
carried (its four wheels are 2.6 MB, and it adds ~0.07 s to an import of
``harness.training.run`` that takes 5-6 s; a dataclass config would change every caller of
``TrainConfig``'s validation, and the study spec the runner reads is pydantic too).

:func:`image_environment` builds, on this machine, a virtual environment whose site-packages
hold only the distributions the image has, plus the kit's, as links to this interpreter's
own: the test that runs the device script's CPU smoke there (``tests/studies/test_device_image.py``)
shows that the device path imports and runs with nothing else, metadata lookups included
(Lightning asks ``importlib.metadata`` whether MLflow is installed).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import venv
from collections.abc import Iterable
from pathlib import Path

#: Python and torch on the device (the workplace's notes, 2026-11).
DEVICE_PYTHON = "3.12"
DEVICE_TORCH = "2.11"

#: The distributions of the device image (normalised names, :func:`normalise`).
IMAGE_PACKAGES: frozenset[str] = frozenset(
    """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
    jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
    mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
    numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
    nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
    nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
    onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
    pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning
    pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
    tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers
    toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
    triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
    xxhash yarl zipp
    """.split()
)

#: Wheels the device path needs beyond the image: pydantic and what it needs there, pinned to
#: the versions the harness is tested with here (``harness device kit`` downloads them for
#: Python 3.12 on manylinux x86-64).
KIT_WHEELS: dict[str, str] = {
    "pydantic": "2.13.4",
    "pydantic-core": "2.46.4",
    "annotated-types": "0.7.0",
    "typing-inspection": "0.4.2",
}


def normalise(name: str) -> str:
    """A distribution's name as the package index compares names (PEP 503): ``PyYAML`` ->
    ``pyyaml``, ``typing_extensions`` -> ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def missing_on_image(names: Iterable[str], *, extra: Iterable[str] = KIT_WHEELS) -> list[str]:
    """The distributions among ``names`` that neither the image nor ``extra`` holds."""
    allowed = IMAGE_PACKAGES | {normalise(n) for n in extra}
    return sorted({normalise(n) for n in names} - allowed)


def _top_level_entries(dist: importlib.metadata.Distribution) -> set[str]:
    """The first path parts of a distribution's files inside its site-packages folder (its
    packages, modules, ``.pth`` files, metadata folder), not its scripts (``../../bin``)."""
    return {Path(str(f)).parts[0] for f in dist.files or () if Path(str(f)).parts and Path(str(f)).parts[0] != ".."}


def image_environment(dest: Path, *, extra: Iterable[str] = KIT_WHEELS) -> Path:
    """A virtual environment at ``dest`` (made anew) whose site-packages link to this
    interpreter's distributions that the device image holds, plus ``extra``; returns its
    ``python``. The harness itself is not installed there: run it with ``PYTHONPATH`` set to
    the checkout.

    A distribution the image lists but this machine lacks is absent there too (this machine
    has torch's CPU build and none of CUDA's libraries); what matters is that nothing outside
    the image is present."""
    dest = Path(dest)
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(dest)
    site = dest / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    allowed = IMAGE_PACKAGES | {normalise(n) for n in extra}
    for dist in importlib.metadata.distributions():
        if normalise(dist.metadata["Name"] or "") not in allowed:
            continue
        for entry in _top_level_entries(dist):
            source = Path(str(dist.locate_file(entry)))
            target = site / entry
            if source.exists() and not os.path.lexists(target):
                target.symlink_to(source)
    return dest / "bin" / "python"
