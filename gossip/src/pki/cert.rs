//! Node certificates: how the node id and role are written into the SAN, and read back.

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose,
    SanType,
};
use x509_parser::extensions::GeneralName;
use x509_parser::time::ASN1Time;

use super::PkiError;
use crate::identity::{NodeId, PeerIdentity, Role};

/// Node certificates are valid this long.
pub(crate) const NODE_CERT_DAYS: i64 = 365;
/// The CA certificate is valid this long.
pub(crate) const CA_CERT_DAYS: i64 = 3650;

/// SHA-256 of a DER certificate.
pub fn fingerprint(der: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn uri(cluster_id: &str, role: Role, node: &NodeId) -> String {
    format!("daros://{cluster_id}/{role}/{node}")
}

pub(crate) fn validity(params: &mut CertificateParams, days: i64) -> Result<(), PkiError> {
    let now = ASN1Time::now().timestamp();
    let t = |secs: i64| {
        ASN1Time::from_timestamp(secs)
            .map(|t| t.to_datetime())
            .map_err(|e| PkiError::Identity(format!("bad validity time: {e}")))
    };
    params.not_before = t(now - 3600)?;
    params.not_after = t(now + days * 86_400)?;
    Ok(())
}

/// Parameters of a node certificate: DNS SAN = node id (the TLS server name), URI SAN =
/// `daros://<cluster>/<role>/<node>`.
pub(crate) fn node_params(
    cluster_id: &str,
    node: &NodeId,
    role: Role,
) -> Result<CertificateParams, PkiError> {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, node.as_str());
    dn.push(
        DnType::OrganizationName,
        format!("daros cluster {cluster_id}"),
    );
    p.distinguished_name = dn;
    p.subject_alt_names = vec![
        SanType::DnsName(node.as_str().try_into()?),
        SanType::URI(uri(cluster_id, role, node).try_into()?),
    ];
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.use_authority_key_identifier_extension = true;
    validity(&mut p, NODE_CERT_DAYS)?;
    Ok(p)
}

/// Reads the D-AROS identity out of a certificate that rustls already verified against the
/// cluster CA. The URI SAN must name this cluster, and the DNS SAN must repeat the node id.
pub fn identity_from_cert(der: &[u8], cluster_id: &str) -> Result<PeerIdentity, PkiError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| PkiError::Identity(format!("unparsable certificate: {e}")))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| PkiError::Identity(format!("bad SAN extension: {e}")))?
        .ok_or_else(|| PkiError::Identity("no SAN extension".into()))?;
    let mut found: Option<PeerIdentity> = None;
    let mut dns: Vec<&str> = Vec::new();
    for name in &san.value.general_names {
        match name {
            GeneralName::URI(u) => {
                if let Some(rest) = u.strip_prefix("daros://") {
                    let parts: Vec<&str> = rest.split('/').collect();
                    if parts.len() != 3 {
                        return Err(PkiError::Identity(format!("malformed URI SAN {u:?}")));
                    }
                    if parts[0] != cluster_id {
                        return Err(PkiError::Identity(format!(
                            "certificate is for cluster {:?}, not {cluster_id:?}",
                            parts[0]
                        )));
                    }
                    let role = parts[1]
                        .parse::<Role>()
                        .map_err(|e| PkiError::Identity(e.to_string()))?;
                    let node_id =
                        NodeId::new(parts[2]).map_err(|e| PkiError::Identity(e.to_string()))?;
                    if found.is_some() {
                        return Err(PkiError::Identity("two daros URI SANs".into()));
                    }
                    found = Some(PeerIdentity { node_id, role });
                }
            }
            GeneralName::DNSName(d) => dns.push(d),
            _ => {}
        }
    }
    let id = found.ok_or_else(|| PkiError::Identity("no daros:// URI SAN".into()))?;
    if !dns.contains(&id.node_id.as_str()) {
        return Err(PkiError::Identity(format!(
            "DNS SAN does not name node {}",
            id.node_id
        )));
    }
    Ok(id)
}
