"""The model layer: the networks (SmallCNN, CharGRU, the EDM denoiser) and how each is trained,
privately or not. It knows nothing of worlds, specs or pipelines."""

#: the image network every spec uses unless it names another (:mod:`.networks`); here, where
#: naming it imports no torch.
DEFAULT_NETWORK = "smallcnn"
