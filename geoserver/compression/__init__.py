"""WAN compression along the trees (issue 12): typed settings (:mod:`.config`), the wire
form of a compressed chunk (:mod:`.payload`), the lossy steps (:mod:`.codecs`) and per-hop
error feedback (:mod:`.feedback`). See docs/compression.md."""
from ..config.compression import CompressionConfig, CompressionError
from .feedback import DOWN, UP, DenseCodec, ErrorFeedback, WanCodec
from .payload import PayloadError

__all__ = ["CompressionConfig", "CompressionError", "DOWN", "UP", "DenseCodec",
           "ErrorFeedback", "PayloadError", "WanCodec"]
