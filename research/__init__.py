"""rein's research tooling: dataset building, training and studies. The runtime never imports it,
and it is not part of the installed wheel; run it from a checkout (`python -m research.…`)."""
