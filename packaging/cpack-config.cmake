# SPDX-License-Identifier: Apache-2.0
# Read by cpack for each generator. RPM distributions lay Python out their own way (the
# site-packages of one version under lib64), so python3-tutti is a deb alone; they build the
# module from bindings/python.
if(CPACK_GENERATOR STREQUAL "RPM")
  list(REMOVE_ITEM CPACK_COMPONENTS_ALL python)
endif()
