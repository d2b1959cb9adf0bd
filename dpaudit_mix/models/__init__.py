"""The model layer: the networks (SmallCNN, CharGRU, the EDM denoiser) and how each is trained,
privately or not. It knows nothing of worlds, specs or pipelines."""
