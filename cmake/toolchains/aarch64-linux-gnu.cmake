# SPDX-License-Identifier: Apache-2.0
# Cross build for Linux aarch64 with Debian's cross compiler and arm64 multiarch packages:
#   sudo dpkg --add-architecture arm64 && sudo apt-get update
#   sudo apt-get install g++-aarch64-linux-gnu qemu-user-static libhwy-dev:arm64
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
# Tests and examples then run under qemu-aarch64-static (CMAKE_CROSSCOMPILING_EMULATOR).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Headers are shared between architectures in /usr/include; libraries and CMake packages
# are under lib/aarch64-linux-gnu.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# qemu loads the arm64 multiarch glibc (libc6:arm64, which libhwy-dev:arm64 brings): under
# qemu-user, the cross toolchain's own copy in /usr/aarch64-linux-gnu hangs in
# pthread_create (a five-line std::thread program does; the multiarch one runs it).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L /)
