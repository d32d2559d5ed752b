# Sourced by device_flow.sh (on the GPU machine) and device_parity.sh (its library versions on a CPU host):
# the one line that installs our packages on the device, editable, from the checkout, without dependencies or
# an index (the image carries the libraries; hatchling and editables come from the staged .whl).
#   install_ytk_for_device PYTHON
install_ytk_for_device() {
  "$1" -m pip install -q --no-deps --no-build-isolation --no-index -e hookspecs -e . -e backends/mock \
    -e backends/nvcc -e backends/torch -e backends/templates -e backends/triton -e backends/tensorrt \
    -e backends/kronos -e backends/gaia
}
