"""Embedded offline data (DESIGN §9): images, public sources, proxies, problem builders."""
