"""DVC stage `prepare`: source data -> sharded TFRecords + manifest.json (+ vocab.txt for text)."""

from pipeline._cli import main

if __name__ == "__main__":
    from tfpipe.stages import run_prepare

    main("prepare", run_prepare, __doc__)
