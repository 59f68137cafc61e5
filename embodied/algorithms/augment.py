"""Image augmentation for off-policy critics on pixels: DrQ's random shift (Kostrikov et al. 2020).

Each image is padded by ``pad`` pixels on every side with its border pixels repeated (replicate padding),
then cropped back to its size at an offset drawn uniformly from ``[0, 2 * pad]`` in each direction: a random
shift of up to ``pad`` pixels. DrQ found this one augmentation enough to make SAC learn from 84x84 pixels as
well as from states; RLPD's pixel recipe uses it too. The shift is an integer, so uint8 images stay uint8
and exact (the policy converts them to float itself).

    shifted = random_shift(images, pad=4, generator=g)   # uint8 [B, H, W, C] -> uint8 [B, H, W, C]
"""

from __future__ import annotations

import torch


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``images`` [B, H, W, C] (any dtype) each shifted by its own offset in ``[-pad, pad]`` along H and W,
    the uncovered border filled with the nearest edge pixel; ``pad == 0`` returns ``images`` unchanged.

    Equal to ``F.pad(x, (pad,) * 4, mode="replicate")`` followed by a crop at ``(pad + dy, pad + dx)``, done as
    one gather of clamped row and column indices so that integer images need no float round trip.
    """
    if pad < 0:
        raise ValueError(f"random_shift: pad must be >= 0, got {pad}")
    if pad == 0:
        return images
    b, h, w = images.shape[:3]
    shift = torch.randint(-pad, pad + 1, (b, 2), generator=generator)  # (dy, dx) per image, on the CPU
    rows = (torch.arange(h) + shift[:, :1]).clamp(0, h - 1).to(images.device)  # [B, H]
    cols = (torch.arange(w) + shift[:, 1:]).clamp(0, w - 1).to(images.device)  # [B, W]
    batch = torch.arange(b, device=images.device)
    return images[batch[:, None, None], rows[:, :, None], cols[:, None, :]]
