"""sam2's image predictor as its README runs it on CUDA (`build_sam2` then
`SAM2ImagePredictor`, a point prompt), with the smallest config and random weights (no
checkpoint download): the same seed first on the CPU, as the reference. Prints the masks' shape
and `mask agreement with the CPU run: X` (the fraction of mask pixels that agree)."""

import numpy as np
import torch
from sam2.build_sam import build_sam2
from sam2.sam2_image_predictor import SAM2ImagePredictor

CONFIG = "configs/sam2.1/sam2.1_hiera_t.yaml"


def predict(device: str) -> np.ndarray:
    torch.manual_seed(0)
    predictor = SAM2ImagePredictor(build_sam2(CONFIG, None, device=device))
    image = np.random.default_rng(0).integers(0, 256, (512, 512, 3), dtype=np.uint8)
    with torch.inference_mode():
        predictor.set_image(image)
        masks, _, _ = predictor.predict(point_coords=np.array([[256, 256]]), point_labels=np.array([1]))
    return masks


def main() -> None:
    reference = predict("cpu")
    masks = predict("cuda")
    print(f"masks {masks.shape}")
    print(f"mask agreement with the CPU run: {(masks == reference).mean():.4f}")


if __name__ == "__main__":
    main()
