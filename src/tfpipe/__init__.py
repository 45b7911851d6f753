"""tfpipe: a reproducible MLOps pipeline for TensorFlow (stages, tracking, audits, launchers)."""

from tfpipe import lean_keras

lean_keras.install()  # before anything imports Keras: its optional extras are 3 s of each stage's start
