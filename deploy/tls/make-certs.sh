#!/usr/bin/env bash
# Makes the files peers need to authenticate each other (mutual TLS and the cluster secret),
# with openssl alone. Run it on a trusted machine, then copy each node its files.
#
#   deploy/tls/make-certs.sh DIR NAME SAN[,SAN...]
#
# - DIR/ca.crt, DIR/ca.key: the cluster's CA (made on the first run, reused after). ca.crt
#   goes to every node; ca.key stays here, offline.
# - DIR/NAME.crt, DIR/NAME.key: a certificate and key for one node (or one shared by the
#   pods of a StatefulSet), valid for server and client use. Its SANs must name the host
#   peers dial (the host part of --grpc / --advertise-grpc): IP addresses and DNS names,
#   a leading "*." for every pod behind a headless Service.
# - DIR/cluster.secret: 32 random bytes, hex (made on the first run): the same on every node
#   (--cluster-secret-file or ROWCALL_CLUSTER_SECRET).
#
# Examples:
#   deploy/tls/make-certs.sh tls node-1 10.0.0.1            # systemd, one per host
#   deploy/tls/make-certs.sh tls node-2 10.0.0.2,db2.example.org
#   deploy/tls/make-certs.sh tls peers '*.rowcall-peers'    # the Kubernetes StatefulSet
#
# Renew a node's certificate by running it again with the same NAME (the old files are
# replaced); nodes read changed files within [cluster.tls] reload_secs. Keys are EC P-256,
# certificates valid for DAYS (default 825) days.
set -euo pipefail

if [ "$#" -ne 3 ]; then
  sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
dir=$1 name=$2 sans=$3
days=${DAYS:-825}
case "$name" in
  *[!A-Za-z0-9._-]* | "" | ca | cluster) echo "make-certs: bad NAME $name" >&2; exit 2 ;;
esac
umask 077
mkdir -p "$dir"
cd "$dir"

if [ ! -f ca.key ]; then
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
  openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=rowcall cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out ca.crt
  chmod 0644 ca.crt
  echo "made the CA: $dir/ca.crt (and ca.key: keep it off the nodes)"
fi
if [ ! -f cluster.secret ]; then
  openssl rand -hex 32 > cluster.secret
  echo "made the cluster secret: $dir/cluster.secret"
fi

# subjectAltName: IP: for addresses, DNS: for names.
alt=""
IFS=, read -r -a list <<< "$sans"
for san in "${list[@]}"; do
  case "$san" in
    "") continue ;;
    *:* | [0-9]*.[0-9]*.[0-9]*.[0-9]*) entry="IP:${san#[}"; entry="${entry%]}" ;;
    *) entry="DNS:$san" ;;
  esac
  alt="${alt:+$alt,}$entry"
done
[ -n "$alt" ] || { echo "make-certs: no SAN given" >&2; exit 2; }
# A peer speaks only for the node id its certificate names: node-N also names
# node-N.peer.rowcall.
case "$name" in
  node-[0-9]*) alt="$alt,DNS:$name.peer.rowcall" ;;
esac

openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$name.key.new"
openssl req -new -key "$name.key.new" -subj "/CN=$name" -out "$name.csr"
ext=$(mktemp)
trap 'rm -f "$ext" "$name.csr"' EXIT
cat > "$ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$alt
EXT
openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
  -days "$days" -extfile "$ext" -out "$name.crt.new" 2>/dev/null
# Key first, then certificate: a node reloading in between sees a pair that fails to
# load and keeps the old one until both are in place.
mv "$name.key.new" "$name.key"
mv "$name.crt.new" "$name.crt"
chmod 0644 "$name.crt"
echo "made $dir/$name.crt and $dir/$name.key for $alt"
