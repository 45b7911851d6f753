"""The packaged defaults: the wheel ships this folder as `tfpipe.conf` (pyproject.toml), and a project made by
`tfpipe init` extends it through Hydra's search path (`pkg://tfpipe.conf`). Here it is this project's own conf/."""
