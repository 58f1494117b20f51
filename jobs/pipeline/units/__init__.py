"""Where a broker's units come from: one class per kind behind one protocol (base.py), chosen once per broker
when the run is planned (choose.py). The pipeline, explain, the consume-queue audit and the data source ask the
chosen objects; the `--units-from` strings live in choose.py alone."""
