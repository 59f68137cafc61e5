"""DrQ's random shift against the plain definition: replicate-pad, then crop back at an offset per image."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from embodied.algorithms.augment import random_shift


def images(b=16, h=12, w=10, seed=0) -> torch.Tensor:
    return torch.randint(0, 256, (b, h, w, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def padded_crops(image: torch.Tensor, pad: int) -> dict[tuple[int, int], torch.Tensor]:
    """Every crop of ``image`` [H, W, C] replicate-padded by ``pad``, keyed by its shift (dy, dx)."""
    h, w = image.shape[:2]
    padded = F.pad(image.permute(2, 0, 1)[None].float(), (pad,) * 4, mode="replicate")[0].permute(1, 2, 0)
    return {(dy, dx): padded[pad + dy: pad + dy + h, pad + dx: pad + dx + w].to(image.dtype)
            for dy in range(-pad, pad + 1) for dx in range(-pad, pad + 1)}


@pytest.mark.parametrize("pad", [1, 4])
def test_each_image_is_a_padded_crop_within_the_bounds(pad):
    x = images()
    out = random_shift(x, pad, torch.Generator().manual_seed(1))
    assert out.shape == x.shape and out.dtype == torch.uint8
    shifts = []
    for b in range(len(x)):
        matches = [s for s, crop in padded_crops(x[b], pad).items() if torch.equal(crop, out[b])]
        assert matches, f"image {b} is no crop of its padded self within {pad} pixels"
        shifts.append(matches[0])
    assert len(set(shifts)) > 1  # drawn per image, not one shift for the batch


def test_zero_pad_is_the_identity_and_draws_nothing():
    x, g = images(), torch.Generator().manual_seed(3)
    state = g.get_state()
    assert random_shift(x, 0, g) is x
    assert torch.equal(g.get_state(), state)


def test_same_generator_state_draws_the_same_shifts():
    x = images()
    a = random_shift(x, 4, torch.Generator().manual_seed(7))
    b = random_shift(x, 4, torch.Generator().manual_seed(7))
    c = random_shift(x, 4, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_float_images_and_negative_pad():
    x = torch.rand(4, 8, 8, 3)
    assert random_shift(x, 2, torch.Generator().manual_seed(0)).dtype == torch.float32
    with pytest.raises(ValueError, match="pad must be >= 0"):
        random_shift(x, -1)
