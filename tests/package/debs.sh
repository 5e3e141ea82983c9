#!/bin/bash
# The Debian packages, as a user gets them: configure and build the
# 'package' preset (prefix /usr, build/package), cpack -G DEB, then check
# each package's name, dependencies and files, unpack them all into a
# scratch root (dpkg-deb -x: no dpkg database or root needed) and use what
# is there: smbd checks its shipped config, smbctl runs from the root's
# /usr/bin, a C program builds with `pkg-config --cflags --libs smb`, a C++
# and a C program with find_package(smb) and one with smb::engine, and
# Python imports smb.
# $1: the source tree, $2: tests/package.
set -euo pipefail
src=$1 here=$2
build=$src/build/package
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAILED: $*"; exit 1; }

(cd "$src" && cmake --preset package >"$scratch/configure.log") || { cat "$scratch/configure.log"; fail "configure"; }
(cd "$src" && cmake --build --preset package >"$scratch/build.log") || { tail -50 "$scratch/build.log"; fail "build"; }
rm -f "$build"/*.deb
(cd "$build" && cpack -G DEB >"$scratch/cpack.log" 2>&1) || { cat "$scratch/cpack.log"; fail "cpack"; }

field() { dpkg-deb -f "$1" "$2"; }
deb() { ls "$build/$1"_*.deb 2>/dev/null | head -1; }
for package in smbd libsmb0 libsmb-dev smb-tools python3-smb; do
  [[ -n $(deb "$package") ]] || fail "no $package package: $(ls "$build"/*.deb)"
  [[ $(field "$(deb "$package")" Package) == "$package" ]] || fail "$package: wrong Package field"
done
depends() { field "$(deb "$1")" Depends; }
[[ $(depends smbd) == *libucx0* && $(depends smbd) == *libibverbs1* ]] || fail "smbd Depends: $(depends smbd)"
[[ $(depends smb-tools) == *libsmb0* ]] || fail "smb-tools Depends: $(depends smb-tools)"
[[ $(depends libsmb-dev) == *libsmb0* ]] || fail "libsmb-dev Depends: $(depends libsmb-dev)"
[[ $(depends python3-smb) == *libsmb0* && $(depends python3-smb) == *python3* ]] || fail "python3-smb Depends: $(depends python3-smb)"
mkdir "$scratch/control"
dpkg-deb -e "$(deb smbd)" "$scratch/control"
grep -qx /etc/smb/smbd.toml "$scratch/control/conffiles" || fail "smbd: /etc/smb/smbd.toml is not a conffile"
[[ -x $scratch/control/postinst ]] || fail "smbd: no postinst"

root=$scratch/root
for package in smbd libsmb0 libsmb-dev smb-tools python3-smb; do dpkg-deb -x "$(deb "$package")" "$root"; done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
for file in usr/bin/smbd usr/bin/smbctl usr/bin/smb-bench usr/bin/smbrun etc/smb/smbd.toml \
            usr/lib/systemd/system/smbd.service usr/lib/systemd/system/smbd@.service usr/lib/sysusers.d/smbd.conf \
            usr/lib/systemd/system/smb-repair.service \
            "usr/lib/$multiarch/libsmb.so.0" "usr/lib/$multiarch/libsmb.so" "usr/lib/$multiarch/pkgconfig/smb.pc" \
            "usr/lib/$multiarch/libsmb-engine.so.0" "usr/lib/$multiarch/libsmb-engine.so" \
            "usr/lib/$multiarch/pkgconfig/smb-engine.pc" \
            "usr/lib/$multiarch/cmake/smb/smbConfig.cmake" usr/include/smb/smb.h usr/lib/python3/dist-packages/smb/__init__.py \
            usr/lib/python3/dist-packages/smb/run.py usr/lib/python3/dist-packages/smb/torch/__init__.py; do
  [[ -e $root/$file ]] || fail "not in the packages: /$file"
done
# The programs find libsmb in the root, not the system's (there is none).
env -u LD_LIBRARY_PATH "$root/usr/bin/smbd" --check-config "$root/etc/smb/smbd.toml" >/dev/null
env -u LD_LIBRARY_PATH "$root/usr/bin/smbctl" --help >/dev/null
out=$(env -u LD_LIBRARY_PATH "$root/usr/bin/smbctl" --servers 127.0.0.1:1 status 2>&1) && fail "smbctl reached 127.0.0.1:1?"
[[ $out == *127.0.0.1:1* ]] || fail "smbctl status: $out"

export PKG_CONFIG_PATH=$root/usr/lib/$multiarch/pkgconfig
# shellcheck disable=SC2046  # pkg-config's words are meant to split
cc -o "$scratch/consumer_pc" "$here/consumer/main.c" $(pkg-config --cflags --libs smb) \
  -Wl,-rpath,"$root/usr/lib/$multiarch" || fail "building with pkg-config"
"$scratch/consumer_pc"
cmake -S "$here/consumer" -B "$scratch/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$root/usr" \
  -DCMAKE_BUILD_TYPE=Release >"$scratch/consumer.log" || { cat "$scratch/consumer.log"; fail "find_package(smb)"; }
cmake --build "$scratch/consumer" >/dev/null || fail "building with find_package(smb)"
"$scratch/consumer/consumer_cpp"
"$scratch/consumer/consumer_c"
"$scratch/consumer/consumer_engine"
PYTHONPATH=$root/usr/lib/python3/dist-packages /usr/bin/python3 -c \
  "import smb, sys; assert smb.__file__.startswith('$root'), smb.__file__; print('python3-smb: import smb from', smb.__file__)"
# smbrun ships with the package it runs (smb.run), and runs from the root.
[[ $(dpkg-deb -c "$(deb python3-smb)") == *" ./usr/bin/smbrun"* ]] || fail "smbrun is not in python3-smb"
help=$(PYTHONPATH=$root/usr/lib/python3/dist-packages "$root/usr/bin/smbrun" --help) || fail "smbrun --help from the packages"
[[ $help == *"memory servers"* ]] || fail "smbrun --help: $help"
echo "packages: $(cd "$build" && ls ./*.deb | tr '\n' ' ')"
