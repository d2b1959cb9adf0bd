"""The base layer: what every other layer uses and nothing here imports from above it.

Files written atomically (:mod:`.atomic`), content digests and the user cache (:mod:`.cache`),
arrays read without pickle (:mod:`.npz`), named random streams and the OS CSPRNG
(:mod:`.randomness`), the registries every seam uses (:mod:`.registry`), spec files
(:mod:`.specfile`), the package's errors and exit codes (:mod:`.errors`), resource limits
(:mod:`.resources`), progress and tables (:mod:`.reporting`), and the small helpers beside them.
"""
