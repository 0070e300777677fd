"""Input-pipeline building blocks for sensitivity profiling: a MinIO cache, bandwidth-capped file storage,
and an example CPU-bound preprocessing transform."""

from perfpredict.data.file_dataset import (
    BandwidthLimitedReader,
    FileDataset,
    write_synthetic_files,
)
from perfpredict.data.minio_cache import CacheStats, MinIOCache
from perfpredict.data.preprocess import DecodeAugment, Preprocessed

__all__ = [
    "BandwidthLimitedReader", "CacheStats", "DecodeAugment", "FileDataset", "MinIOCache", "Preprocessed",
    "write_synthetic_files",
]
