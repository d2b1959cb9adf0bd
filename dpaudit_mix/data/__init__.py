"""Embedded offline data (docs/concepts/pipeline.md): images, public sources, proxies, problem builders."""
