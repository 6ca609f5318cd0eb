"""Puzzle photographs: scikit-image's bundled samples (no download) or any image file."""

from __future__ import annotations

import functools
from pathlib import Path

from agent.extras import needs_extra

with needs_extra("jigsaw", "the jigsaw environment"):
    import numpy as np
    import PIL  # noqa: F401  (imported lazily below; a missing extra shows here, not mid-episode)
    import skimage  # noqa: F401

from agent.errors import UserFacingError

# Photos that ship inside the scikit-image wheel (checked offline, without pooch); all are
# public domain or CC0. Names that scikit-image downloads at run time are deliberately absent.
BUNDLED_PHOTOS: dict[str, str] = {
    "astronaut": "public domain (NASA, Eileen Collins)",
    "chelsea": "CC0 (Stefan van der Walt)",
    "coffee": "CC0 (Rachel Michetti)",
    "rocket": "public domain (SpaceX)",
    "hubble_deep_field": "public domain (NASA)",
    "immunohistochemistry": "no known copyright restrictions",
    "camera": "CC0 (Lav Varshney); grayscale",
}
"""Bundled photo name → licence note."""

DEFAULT_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field")
"""The colour CC0/public-domain photos used by the benchmark."""


class ImageLoadError(UserFacingError):
    """The image could not be found or decoded."""


def load_image(source: str | Path, max_side: int = 512) -> np.ndarray:
    """An RGB uint8 array (H, W, 3) from a bundled photo name or an image file, downscaled to max_side."""
    key = str(source)
    image = _bundled(key) if key in BUNDLED_PHOTOS else _from_file(Path(key).expanduser())
    return _fit(image, max_side)


def _from_file(path: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    if not path.exists():
        names = ", ".join(BUNDLED_PHOTOS)
        raise ImageLoadError(f"image {str(path)!r} is neither a file nor a bundled photo ({names})")
    if not path.is_file():
        raise ImageLoadError(f"image path {str(path)!r} is not a file")
    try:
        with Image.open(path) as handle:
            handle.load()
            return _as_rgb(np.asarray(handle.convert("RGB")))
    except Image.DecompressionBombError as exc:
        raise ImageLoadError(f"image {str(path)!r} is too large to load safely: {exc}") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ImageLoadError(f"cannot read image {str(path)!r}: {exc}") from None


@functools.lru_cache(maxsize=16)
def _bundled(name: str) -> np.ndarray:
    import skimage.data

    image = _as_rgb(np.asarray(getattr(skimage.data, name)()))
    image.setflags(write=False)
    return image


def _as_rgb(image: np.ndarray) -> np.ndarray:
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    if image.ndim != 3 or image.shape[2] < 3:
        raise ImageLoadError(f"expected a colour or grayscale image, got an array of shape {image.shape}")
    image = image[..., :3]
    if image.dtype != np.uint8:
        scale = 255.0 if image.dtype.kind == "f" and float(image.max(initial=0)) <= 1.0 else 1.0
        image = np.clip(image.astype(np.float64) * scale, 0, 255).astype(np.uint8)
    return image


def _fit(image: np.ndarray, max_side: int) -> np.ndarray:
    height, width = image.shape[:2]
    if max(height, width) <= max_side:
        return image
    from PIL import Image

    scale = max_side / max(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return np.asarray(Image.fromarray(image).resize(size, Image.Resampling.LANCZOS))
