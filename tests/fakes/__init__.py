"""Local fake servers speaking the real wire protocols of model APIs, so no test touches the internet."""
