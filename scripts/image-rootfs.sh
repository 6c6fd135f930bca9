#!/bin/sh
# image-rootfs.sh DIR: the files of the container image besides the binary
# (DIR/usr/local/bin/newsfeed): /etc/passwd and /etc/group naming the user
# it runs as (newsfeed, 65532, no shell, no home), and the CA certificates
# for TLS to PostgreSQL, Redis and collectors. The Dockerfile's golang stage
# and `make image` (on the host) both call it, so both images hold the same.
set -eu
dir=${1:?usage: image-rootfs.sh DIR}
certs=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$certs" ]; then
	echo "image-rootfs.sh: no CA certificates at $certs: install them (Debian/Ubuntu: apt-get install -y ca-certificates)" >&2
	exit 1
fi
mkdir -p "$dir/etc/ssl/certs" "$dir/etc/newsfeed" "$dir/tmp"
chmod 1777 "$dir/tmp"
cp "$certs" "$dir/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnewsfeed:x:65532:65532:newsfeed:/nonexistent:/sbin/nologin\n' >"$dir/etc/passwd"
printf 'root:x:0:\nnewsfeed:x:65532:\n' >"$dir/etc/group"
