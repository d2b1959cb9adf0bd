"""The pipeline core (the stage machine every track runs, how methods choose λ) and the image track."""
