"""Local embeddings of code entities: model location and checks, encoder, text, cache.

``cogd.embed.model`` needs only the standard library at import; ``numpy``,
``onnxruntime`` and ``tokenizers`` load with the encoder. Nothing here imports
the daemon, retrieval or the command line.
"""

from cogd.embed.model import ModelError, ModelInfo, list_models, resolve_model

__all__ = ["ModelError", "ModelInfo", "list_models", "resolve_model"]
