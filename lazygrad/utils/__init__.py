"""torch.utils's counterparts: `lazygrad.utils.data` (datasets, samplers, DataLoader)."""

from lazygrad.utils import data

__all__ = ["data"]
