"""__PROJECT__'s own code: the model tfpipe trains (conf/model/__MODEL__.yaml names it)."""
