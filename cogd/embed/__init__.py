"""Local embeddings of code entities: model location and checks, encoder, text, cache.

``cogd.embed.model`` needs only the standard library at import; ``numpy``,
``onnxruntime`` and ``tokenizers`` load with the encoder. Nothing here imports
the daemon, retrieval or the command line.
"""

import os

# onnxruntime's wheels carry Microsoft's "1DS" telemetry: importing the package creates
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime/ (a device id and an event queue naming the
# process, the OS and the CPU), outside anything cogd owns, and
# ``onnxruntime.disable_telemetry_events()`` does not stop it. The variable does, when it is
# set before onnxruntime loads; every onnxruntime import in cogd is under this package, so
# setting it here covers the daemon, the CLI and the derivation's child process (which
# inherits it). A value the user set is kept.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from cogd.embed.model import ModelError, ModelInfo, list_models, resolve_model  # noqa: E402

__all__ = ["ModelError", "ModelInfo", "list_models", "resolve_model"]
