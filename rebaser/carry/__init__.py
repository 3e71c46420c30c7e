"""How one patch's change gets onto another tree: replayed commits, diffs read byte for byte,
upstream's own copy of a change, knock-ons, recorded resolutions. No state, no output."""
