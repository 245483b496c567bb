//! The SSRF guard of the http and mcp runners: a destination is resolved here, every address
//! it resolves to is checked, and the runner then connects to exactly those addresses (never
//! resolving again, so a DNS answer cannot change between the check and the connection).
//!
//! Refused unless the operator's allow-list permits them: loopback, unspecified, private
//! (RFC 1918, IPv6 unique-local), shared (CGNAT), link-local (which holds the cloud metadata
//! address 169.254.169.254), multicast, broadcast and reserved ranges, also when they hide in
//! an IPv6 address that carries an IPv4 one (IPv4-mapped `::ffff:0:0/96`, IPv4-translated
//! `::ffff:0:0:0/96`, IPv4-compatible `::/96`, NAT64 `64:ff9b::/96`). Transition ranges whose far end the node cannot see
//! (local-use NAT64 `64:ff9b:1::/48`, 6to4 `2002::/16`, Teredo `2001::/32`) and the discard
//! prefix `100::/64` are refused whole. One forbidden address among several refuses the
//! whole destination: an attacker's DNS must not be able to mix one in.
//!
//! The allow-list (`[runners] allow` and `ROWCALL_HTTP_ALLOW`) holds CIDRs (`10.0.0.0/8`, a
//! bare address is a /32 or /128) and `host:port` pairs (`127.0.0.1:8080`, `[::1]:9000`,
//! `internal.example:443`); a pair allows that host name or address on that port only.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// One entry of the allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowEntry {
    /// Every address in `addr/prefix`.
    Net {
        /// The network address.
        addr: IpAddr,
        /// Prefix length in bits.
        prefix: u8,
    },
    /// One host (lower-case name, or address) on one port.
    HostPort {
        /// The host as written, lower-case, without brackets.
        host: String,
        /// The port.
        port: u16,
    },
}

impl AllowEntry {
    /// Parses `10.0.0.0/8`, `127.0.0.1`, `::1`, `127.0.0.1:8080`, `[::1]:8080` or `name:443`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some((addr, prefix)) = text.split_once('/') {
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| format!("{text:?}: {addr:?} is not an IP address"))?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix
                .parse()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix must be 0 to {max}"))?;
            return Ok(Self::Net { addr, prefix });
        }
        if let Ok(addr) = text.parse::<IpAddr>() {
            let prefix = if addr.is_ipv4() { 32 } else { 128 };
            return Ok(Self::Net { addr, prefix });
        }
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?} is neither a CIDR nor host:port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{text:?}: {port:?} is not a port"))?;
        if host.is_empty() || host.contains(['/', ' ', '@']) {
            return Err(format!("{text:?}: the host is empty or malformed"));
        }
        Ok(Self::HostPort {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    fn allows(&self, host: &str, port: u16, ip: IpAddr) -> bool {
        match self {
            Self::Net { addr, prefix } => in_net(ip, *addr, *prefix),
            Self::HostPort { host: h, port: p } => {
                *p == port
                    && (h.eq_ignore_ascii_case(host) || h.parse::<IpAddr>().is_ok_and(|a| a == ip))
            }
        }
    }
}

/// The operator's allow-list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<AllowEntry>,
}

impl AllowList {
    /// Parses every entry; the first malformed one is the error.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let entries = entries
            .into_iter()
            .filter(|e| !e.trim().is_empty())
            .map(AllowEntry::parse)
            .collect::<Result<_, _>>()?;
        Ok(Self { entries })
    }

    /// Parses every entry, skipping (and logging) malformed ones: a bad entry allows nothing.
    pub fn lenient<'a>(entries: impl IntoIterator<Item = &'a str>) -> Self {
        let entries = entries
            .into_iter()
            .filter(|e| !e.trim().is_empty())
            .filter_map(|e| {
                AllowEntry::parse(e)
                    .map_err(|reason| tracing::warn!(%reason, "ignoring an allow-list entry"))
                    .ok()
            })
            .collect();
        Self { entries }
    }

    /// Whether `ip`, reached as `host:port`, may be contacted.
    pub fn permits(&self, host: &str, port: u16, ip: IpAddr) -> bool {
        forbidden_range(ip).is_none() || self.entries.iter().any(|e| e.allows(host, port, ip))
    }
}

/// Why a destination was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The name did not resolve.
    #[error("{host} does not resolve: {reason}")]
    Unresolved {
        /// The host.
        host: String,
        /// The resolver's error.
        reason: String,
    },
    /// An address of the destination is in a range runners may not reach.
    #[error("{host}:{port} resolves to {ip}, a {range} address; an operator must allow it (ROWCALL_HTTP_ALLOW)")]
    Forbidden {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The refused address.
        ip: IpAddr,
        /// Which range it is in.
        range: Range,
    },
}

/// The ranges a runner may not reach without an allow-list entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 0.0.0.0/8, ::.
    Unspecified,
    /// 10/8, 172.16/12, 192.168/16, fc00::/7.
    Private,
    /// 100.64/10 (carrier-grade NAT).
    Shared,
    /// 169.254/16 (with the metadata address), fe80::/10.
    LinkLocal,
    /// 224/4, ff00::/8, 255.255.255.255.
    Multicast,
    /// IETF protocol, documentation, benchmarking and reserved ranges.
    Reserved,
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Loopback => "loopback",
            Self::Unspecified => "unspecified",
            Self::Private => "private",
            Self::Shared => "shared (CGNAT)",
            Self::LinkLocal => "link-local (cloud metadata)",
            Self::Multicast => "multicast or broadcast",
            Self::Reserved => "reserved",
        })
    }
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        // An IPv4 rule also covers the IPv4-mapped form of its addresses.
        (IpAddr::V6(ip), IpAddr::V4(_)) => ip
            .to_ipv4_mapped()
            .is_some_and(|v4| in_net(IpAddr::V4(v4), net, prefix)),
        (IpAddr::V4(_), IpAddr::V6(_)) => false,
    }
}

fn v4_range(ip: Ipv4Addr) -> Option<Range> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (127, _, _) => Range::Loopback,
        (0, _, _) => Range::Unspecified,
        (10, _, _) | (192, 168, _) => Range::Private,
        (172, 16..=31, _) => Range::Private,
        (100, 64..=127, _) => Range::Shared,
        (169, 254, _) => Range::LinkLocal,
        (224..=239, _, _) => Range::Multicast,
        _ if ip.is_broadcast() => Range::Multicast,
        (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Range::Reserved,
        (198, 18..=19, _) | (240..=255, _, _) => Range::Reserved,
        _ => return None,
    })
}

fn v6_range(ip: Ipv6Addr) -> Option<Range> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_range(v4);
    }
    let segments = ip.segments();
    let last_v4 = Ipv4Addr::from(u128::from(ip) as u32);
    // NAT64 (64:ff9b::/96) reaches the IPv4 address in its last 32 bits.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return v4_range(last_v4);
    }
    if ip.is_loopback() {
        return Some(Range::Loopback);
    }
    if ip.is_unspecified() {
        return Some(Range::Unspecified);
    }
    // IPv4-compatible (::a.b.c.d, deprecated) and IPv4-translated (::ffff:0:a.b.c.d, SIIT,
    // RFC 2765): some stacks and translators still take them to the IPv4 address, so
    // `::7f00:1` and `::ffff:0:7f00:1` are 127.0.0.1. Nothing public lives there either way.
    if segments[..6] == [0; 6] || segments[..6] == [0, 0, 0, 0, 0xffff, 0] {
        return Some(v4_range(last_v4).unwrap_or(Range::Reserved));
    }
    // Local-use NAT64 (RFC 8215), 6to4 (RFC 3056) and Teredo (RFC 4380) reach IPv4 hosts
    // through translators and relays the node cannot check; discard-only (RFC 6666).
    let transition = segments[..3] == [0x64, 0xff9b, 1]
        || segments[0] == 0x2002
        || segments[..2] == [0x2001, 0]
        || segments[..4] == [0x100, 0, 0, 0];
    if transition {
        return Some(Range::Reserved);
    }
    Some(match segments[0] {
        0xfc00..=0xfdff => Range::Private,
        0xfe80..=0xfebf => Range::LinkLocal,
        0xff00..=0xffff => Range::Multicast,
        // Deprecated site-local, and documentation.
        0xfec0..=0xfeff => Range::Reserved,
        0x2001 if segments[1] == 0x0db8 => Range::Reserved,
        _ => return None,
    })
}

/// The forbidden range `ip` is in, if any.
pub fn forbidden_range(ip: IpAddr) -> Option<Range> {
    match ip {
        IpAddr::V4(v4) => v4_range(v4),
        IpAddr::V6(v6) => v6_range(v6),
    }
}

/// Resolves `host:port` (an address is taken as it is, a name through the system resolver)
/// and checks every address. Returns the addresses to connect to.
pub async fn resolve_checked(
    allow: &AllowList,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Refusal> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| Refusal::Unresolved {
                host: bare.to_owned(),
                reason: e.to_string(),
            })?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(Refusal::Unresolved {
            host: bare.to_owned(),
            reason: "no addresses".into(),
        });
    }
    for addr in &addrs {
        if !allow.permits(bare, port, addr.ip()) {
            return Err(Refusal::Forbidden {
                host: bare.to_owned(),
                port,
                ip: addr.ip(),
                range: forbidden_range(addr.ip()).unwrap_or(Range::Reserved),
            });
        }
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn internal_ranges_are_forbidden_and_public_ones_are_not() {
        for (addr, range) in [
            ("127.0.0.1", Range::Loopback),
            ("127.9.9.9", Range::Loopback),
            ("::1", Range::Loopback),
            ("0.0.0.0", Range::Unspecified),
            ("::", Range::Unspecified),
            ("10.1.2.3", Range::Private),
            ("172.16.0.1", Range::Private),
            ("172.31.255.255", Range::Private),
            ("192.168.1.1", Range::Private),
            ("fd00:ec2::254", Range::Private),
            ("100.64.0.1", Range::Shared),
            ("169.254.169.254", Range::LinkLocal),
            ("fe80::1", Range::LinkLocal),
            ("224.0.0.1", Range::Multicast),
            ("255.255.255.255", Range::Multicast),
            ("::ffff:127.0.0.1", Range::Loopback),
            ("::ffff:169.254.169.254", Range::LinkLocal),
            ("::ffff:0.0.0.0", Range::Unspecified),
            ("::ffff:10.9.8.7", Range::Private),
            ("::ffff:0:7f00:1", Range::Loopback),
            ("::ffff:0:a9fe:a9fe", Range::LinkLocal),
            ("::ffff:0:808:808", Range::Reserved),
            ("64:ff9b::7f00:1", Range::Loopback),
            ("64:ff9b::a9fe:a9fe", Range::LinkLocal),
            ("64:ff9b::a00:1", Range::Private),
            ("240.0.0.1", Range::Reserved),
            ("::7f00:1", Range::Loopback),
            ("::a9fe:a9fe", Range::LinkLocal),
            ("::808:808", Range::Reserved),
            ("2002:7f00:1::1", Range::Reserved),
            ("2002:808:808::1", Range::Reserved),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Range::Reserved),
            ("64:ff9b:1::a00:1", Range::Reserved),
            ("100::1", Range::Reserved),
        ] {
            assert_eq!(forbidden_range(ip(addr)), Some(range), "{addr}");
        }
        for addr in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "2001:4860::8888",
            "100:0:0:1::1",
        ] {
            assert_eq!(forbidden_range(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn allow_entries_parse_and_match() {
        let allow = AllowList::parse([
            "10.0.0.0/8",
            "127.0.0.1:8080",
            "[::1]:9000",
            "Svc.Internal:443",
        ])
        .unwrap();
        assert!(allow.permits("10.9.9.9", 80, ip("10.9.9.9")));
        assert!(allow.permits("x", 1, ip("::ffff:10.1.1.1")));
        assert!(allow.permits("127.0.0.1", 8080, ip("127.0.0.1")));
        assert!(!allow.permits("127.0.0.1", 8081, ip("127.0.0.1")));
        assert!(allow.permits("::1", 9000, ip("::1")));
        assert!(allow.permits("svc.internal", 443, ip("192.168.0.7")));
        assert!(!allow.permits("other.internal", 443, ip("192.168.0.7")));
        assert!(!allow.permits("localhost", 80, ip("127.0.0.1")));
        assert!(AllowList::parse(["10.0.0.0/33"]).is_err());
        assert!(AllowList::parse(["nonsense"]).is_err());
        assert!(AllowList::parse(["host:port"]).is_err());
        assert_eq!(
            AllowList::lenient(["nonsense", "10.0.0.1"]).entries.len(),
            1
        );
    }

    #[tokio::test]
    async fn names_are_checked_after_resolution() {
        let none = AllowList::default();
        let refused = resolve_checked(&none, "localhost", 80).await.unwrap_err();
        assert!(
            matches!(
                refused,
                Refusal::Forbidden {
                    range: Range::Loopback,
                    ..
                }
            ),
            "{refused}"
        );
        let refused = resolve_checked(&none, "169.254.169.254", 80)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("link-local"), "{refused}");
        let allowed = AllowList::parse(["127.0.0.0/8", "::1/128"]).unwrap();
        let addrs = resolve_checked(&allowed, "localhost", 80).await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
