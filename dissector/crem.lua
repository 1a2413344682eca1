-- Wireshark dissector for CREM, the coded repair channel for RoCEv2 (crem-draft), and for the
-- T/C AETH of extended ACKs (tc-aeth-draft).
--
-- CREM has no assigned port: set the domain's CREM port in Preferences > Protocols > CREM,
-- or on the command line:
--   tshark -X lua_script:crem.lua -o crem.port:50000 -r capture.pcap -V
-- Field names follow the draft (crem.flow_id, crem.repair_index, ...), so display filters read
-- like the draft: crem.type == 6 && crem.fallback
-- Malformed messages carry expert info (tshark -z expert) and the text field crem.malformed.
-- RoCEv2 itself is Wireshark's InfiniBand dissector (UDP 4791; -d udp.port==N,infiniband for
-- another port); the postdissector tcaeth adds the T/C AETH after the AETH of an extended ACK:
--   tshark -X lua_script:crem.lua -r capture.pcap -Y tcaeth -T fields -e tcaeth.seg_left -e tcaeth.lost_first

local crem = Proto("crem", "CREM (Coded Repair for RDMA)")

local types = {
  [1] = "REPAIR", [2] = "HELLO", [3] = "HELLO_ACK", [4] = "PARAM_UPDATE", [5] = "PARAM_ACK",
  [6] = "REPAIR_REQUEST", [7] = "LOSS_REPORT", [8] = "PATH_REPORT", [9] = "CLOSE",
}
local schemes = { [0] = "Source Copy", [1] = "Cauchy Reed-Solomon", [2] = "XOR" }
local statuses = { [0] = "accepted", [1] = "unsupported scheme", [2] = "limits exceeded", [3] = "resources exhausted" }
local reasons = {
  [0] = "normal end", [1] = "idle timeout", [2] = "PARAM_UPDATE unanswered", [3] = "resources exhausted",
  [4] = "circuit breaker", [5] = "protocol error",
}
local causes = { [0] = "unknown", [1] = "congestion", [2] = "corruption", [3] = "other" }
local methods = { [1] = "Alternate Marking", [2] = "Clustered Alternate Marking", [3] = "node-local drop accounting" }

local f = crem.fields
f.version = ProtoField.uint8("crem.version", "Version", base.DEC, nil, 0xF0)
f.type = ProtoField.uint8("crem.type", "Type", base.DEC, types, 0x0F)
f.flags = ProtoField.uint8("crem.flags", "Flags", base.HEX)
f.retx = ProtoField.bool("crem.retx", "RETX", 8, nil, 0x80)
f.last = ProtoField.bool("crem.last", "LAST", 8, nil, 0x40)
f.info = ProtoField.bool("crem.info", "INFO", 8, nil, 0x20)
f.fallback = ProtoField.bool("crem.fallback", "FALLBACK", 8, nil, 0x20)
f.ranges = ProtoField.bool("crem.ranges", "RANGES", 8, nil, 0x10)
f.truncated = ProtoField.bool("crem.truncated", "Truncated", 8, nil, 0x80)
f.length = ProtoField.uint16("crem.length", "Length", base.DEC)
f.flow_id = ProtoField.uint32("crem.flow_id", "Flow ID", base.HEX)
f.config_id = ProtoField.uint8("crem.config_id", "Config ID", base.DEC)
f.scheme = ProtoField.uint8("crem.scheme", "Scheme", base.DEC, schemes)
f.k = ProtoField.uint8("crem.k", "k", base.DEC)
f.m = ProtoField.uint8("crem.m", "m", base.DEC)
f.t = ProtoField.uint16("crem.t", "T", base.DEC)
f.repair_index = ProtoField.uint8("crem.repair_index", "Repair Index", base.DEC)
f.block_start_psn = ProtoField.uint24("crem.block_start_psn", "Block Start PSN", base.DEC)
f.repair_session_id = ProtoField.uint16("crem.repair_session_id", "Repair Session ID", base.DEC)
f.symbol_length = ProtoField.uint16("crem.symbol_length", "Symbol Length", base.DEC)
f.present_bitmap = ProtoField.bytes("crem.present_bitmap", "Present Bitmap")
f.lost_source_bitmap = ProtoField.bytes("crem.lost_source_bitmap", "Lost Source Bitmap")
f.symbol = ProtoField.bytes("crem.symbol", "Repair Symbol")
f.flow_kind = ProtoField.uint8("crem.flow_kind", "Flow Kind", base.DEC, { [1] = "RoCEv2" })
f.af = ProtoField.uint8("crem.af", "AF", base.DEC)
f.supported_schemes = ProtoField.uint16("crem.supported_schemes", "Supported Schemes", base.HEX)
f.max_k = ProtoField.uint8("crem.max_k", "Max k", base.DEC)
f.max_m = ProtoField.uint8("crem.max_m", "Max m", base.DEC)
f.max_t = ProtoField.uint16("crem.max_t", "Max T", base.DEC)
f.rdma_mtu = ProtoField.uint16("crem.rdma_mtu", "RDMA MTU", base.DEC)
f.sender_nonce = ProtoField.uint64("crem.sender_nonce", "Sender Nonce", base.HEX)
f.source_address = ProtoField.ipv4("crem.source_address", "Source Address")
f.destination_address = ProtoField.ipv4("crem.destination_address", "Destination Address")
f.source_address6 = ProtoField.ipv6("crem.source_address6", "Source Address")
f.destination_address6 = ProtoField.ipv6("crem.destination_address6", "Destination Address")
f.flow_label = ProtoField.uint32("crem.flow_label", "Flow Label", base.HEX)
f.dest_qp = ProtoField.uint32("crem.dest_qp", "Destination QP", base.HEX, nil, 0x00FFFFFF)
f.max_open_blocks = ProtoField.uint16("crem.max_open_blocks", "Max Open Blocks", base.DEC)
f.effective_psn = ProtoField.uint24("crem.effective_psn", "Effective PSN", base.DEC)
f.status = ProtoField.uint8("crem.status", "Status", base.DEC, statuses)
f.repairs_held = ProtoField.uint8("crem.repairs_held", "Repairs Held r", base.DEC)
f.suggested_m = ProtoField.uint8("crem.suggested_m", "Suggested M", base.DEC)
f.request_id = ProtoField.uint16("crem.request_id", "Request ID", base.DEC)
f.range_count = ProtoField.uint16("crem.range_count", "Range Count", base.DEC)
f.range_start = ProtoField.uint24("crem.range_start_psn", "Start PSN", base.DEC)
f.range_len = ProtoField.uint8("crem.range_count_psns", "Count", base.DEC)
f.interval_us = ProtoField.uint32("crem.interval_us", "Interval (us)", base.DEC)
f.expected = ProtoField.uint32("crem.expected", "Expected", base.DEC)
f.received = ProtoField.uint32("crem.received", "Received", base.DEC)
f.restored = ProtoField.uint32("crem.restored", "Restored", base.DEC)
f.incomplete_blocks = ProtoField.uint32("crem.incomplete_blocks", "Incomplete Blocks", base.DEC)
f.ce_marked = ProtoField.uint32("crem.ce_marked", "CE Marked", base.DEC)
f.repairs_received = ProtoField.uint32("crem.repairs_received", "Repairs Received", base.DEC)
f.repairs_ce_marked = ProtoField.uint32("crem.repairs_ce_marked", "Repairs CE Marked", base.DEC)
f.method = ProtoField.uint8("crem.method", "Method", base.DEC, methods)
f.entry_count = ProtoField.uint8("crem.entry_count", "Entry Count", base.DEC)
f.node_id = ProtoField.uint32("crem.node_id", "Node ID", base.HEX)
f.marking_period = ProtoField.uint32("crem.marking_period_number", "Marking Period Number", base.DEC)
f.lost_count = ProtoField.uint32("crem.lost_count", "Lost Count", base.DEC)
f.queue_delay_change = ProtoField.int32("crem.queue_delay_change_us", "Queue Delay Change (us)", base.DEC)
f.cause = ProtoField.uint8("crem.cause", "Cause", base.DEC, causes)
f.psn_count = ProtoField.uint8("crem.psn_count", "PSN Count", base.DEC)
f.dropped_psn = ProtoField.uint24("crem.dropped_psn", "Dropped PSN", base.DEC)
f.reason = ProtoField.uint8("crem.reason", "Reason", base.DEC, reasons)

f.malformed = ProtoField.string("crem.malformed", "Malformed")

-- Expert info: every problem is both an expert item (tshark -z expert, _ws.expert) and a
-- generated crem.malformed text, so that the filter "crem.malformed" finds every malformed
-- CREM message and -e crem.malformed names the problems.
local function malformed(name, text)
  return ProtoExpert.new("crem." .. name, text, expert.group.MALFORMED, expert.severity.ERROR)
end
local e_short = malformed("short", "Message shorter than its fields")
local e_length = malformed("length_mismatch", "Length differs from the datagram")
local e_version = malformed("bad_version", "Unknown Version: receivers discard the message")
local e_type = malformed("unknown_type", "Unknown Type: receivers discard the message")
local e_entries = malformed("too_many_entries", "Entry Count exceeds 16")
local e_psn_count = malformed("psn_count_beyond", "PSN Count runs beyond the message")
local e_range_count = malformed("range_count_beyond", "Range Count runs beyond the message")
local e_symbol = malformed("symbol_length_mismatch", "Symbol Length disagrees with the message")
local e_trailing = malformed("trailing", "Octets after the message's fields")
local e_field = malformed("bad_field", "Field value the draft does not allow")
crem.experts = { e_short, e_length, e_version, e_type, e_entries, e_psn_count, e_range_count, e_symbol,
  e_trailing, e_field }

crem.prefs.port = Pref.uint("CREM port", 0, "The domain's CREM UDP port (no default: the draft assigns none)")

local function words(k) return math.floor((k + 31) / 32) * 4 end

-- bad marks one problem of the message: a generated crem.malformed item with the text, carrying
-- the expert info.
local function bad(tree, range, e, text)
  local it
  if range then it = tree:add(f.malformed, range, text) else it = tree:add(f.malformed, text) end
  it:set_generated()
  it:add_proto_expert_info(e, text)
end

-- need returns true when len octets remain at off; otherwise it marks the message malformed.
local function need(buf, tree, off, len, what)
  if buf:len() < off + len then
    local text = string.format("%s needs %d octets at offset %d, the message has %d", what or "Field", len, off, buf:len())
    bad(tree, nil, e_short, text)
    return false
  end
  return true
end

local function addresses(buf, tree, off, af)
  if af ~= 4 and af ~= 6 then
    bad(tree, nil, e_field, string.format("AF %d is neither 4 nor 6", af))
    return nil
  end
  local n = (af == 6) and 16 or 4
  if not need(buf, tree, off, 2 * n, "Addresses") then return nil end
  if af == 6 then
    tree:add(f.source_address6, buf(off, 16))
    tree:add(f.destination_address6, buf(off + 16, 16))
  else
    tree:add(f.source_address, buf(off, 4))
    tree:add(f.destination_address, buf(off + 4, 4))
  end
  return off + 2 * n
end

local body = {}

-- Each body decoder returns the Info column's summary and the offset where its fields end
-- (nil when it stopped at a problem it has marked).

body[1] = function(buf, tree, flags) -- REPAIR
  if not need(buf, tree, 8, 12, "REPAIR") then return end
  tree:add(f.config_id, buf(8, 1)); tree:add(f.scheme, buf(9, 1))
  tree:add(f.k, buf(10, 1)); tree:add(f.repair_index, buf(11, 1))
  tree:add(f.block_start_psn, buf(12, 3))
  tree:add(f.repair_session_id, buf(16, 2))
  local tt = tree:add(f.symbol_length, buf(18, 2))
  local k, T, off = buf(10, 1):uint(), buf(18, 2):uint(), 20
  if k == 0 then bad(tree, buf(10, 1), e_field, "k 0 is out of range 1..255"); return end
  if bit.band(flags, 0xA0) == 0xA0 then bad(tree, buf(1, 1), e_field, "RETX and INFO together") end
  local w = words(k)
  if not need(buf, tree, off, w, "Present Bitmap") then return end
  tree:add(f.present_bitmap, buf(off, w)); off = off + w
  if bit.band(flags, 0x80) ~= 0 then
    if not need(buf, tree, off, w, "Lost Source Bitmap") then return end
    tree:add(f.lost_source_bitmap, buf(off, w)); off = off + w
  end
  local summary = string.format("k=%d i=%d PSN=%d", k, buf(11, 1):uint(), buf(12, 3):uint())
  if T ~= buf:len() - off then
    bad(tt, buf(18, 2), e_symbol, string.format("Symbol Length %d, but %d octets follow the bitmaps", T, buf:len() - off))
    if T > buf:len() - off then return summary end
  end
  if T > 0 then tree:add(f.symbol, buf(off, T)) end
  return summary, off + T
end

local function capabilities(buf, tree)
  if not need(buf, tree, 8, 12, "Capabilities") then return false end
  tree:add(f.flow_kind, buf(8, 1)); tree:add(f.af, buf(9, 1)); tree:add(f.supported_schemes, buf(10, 2))
  tree:add(f.max_k, buf(12, 1)); tree:add(f.max_m, buf(13, 1)); tree:add(f.max_t, buf(14, 2))
  tree:add(f.rdma_mtu, buf(16, 2))
  return true
end

body[2] = function(buf, tree) -- HELLO
  if not capabilities(buf, tree) or not need(buf, tree, 20, 8, "Sender Nonce") then return end
  tree:add(f.sender_nonce, buf(20, 8))
  local off = addresses(buf, tree, 28, buf(9, 1):uint())
  if off and need(buf, tree, off, 4, "Flow Label") then
    tree:add(f.flow_label, buf(off, 4)); tree:add(f.dest_qp, buf(off, 4))
    return string.format("QP 0x%06x", bit.band(buf(off, 4):uint(), 0xFFFFFF)), off + 4
  end
end

body[3] = function(buf, tree) -- HELLO_ACK
  if not capabilities(buf, tree) or not need(buf, tree, 20, 12, "HELLO_ACK") then return end
  local af = buf(9, 1):uint()
  if af ~= 4 and af ~= 6 then bad(tree, buf(9, 1), e_field, string.format("AF %d is neither 4 nor 6", af)) end
  tree:add(f.sender_nonce, buf(20, 8)); tree:add(f.max_open_blocks, buf(28, 2))
  return nil, 32
end

body[4] = function(buf, tree) -- PARAM_UPDATE
  if not need(buf, tree, 8, 12, "PARAM_UPDATE") then return end
  tree:add(f.config_id, buf(8, 1)); tree:add(f.scheme, buf(9, 1)); tree:add(f.k, buf(10, 1))
  tree:add(f.m, buf(11, 1)); tree:add(f.t, buf(12, 2)); tree:add(f.effective_psn, buf(16, 3))
  if buf(10, 1):uint() == 0 then bad(tree, buf(10, 1), e_field, "k 0 is out of range 1..255") end
  return string.format("config %d: k=%d m=%d T=%d", buf(8, 1):uint(), buf(10, 1):uint(), buf(11, 1):uint(), buf(12, 2):uint()), 20
end

body[5] = function(buf, tree) -- PARAM_ACK
  if not need(buf, tree, 8, 4, "PARAM_ACK") then return end
  tree:add(f.config_id, buf(8, 1)); tree:add(f.status, buf(9, 1))
  return nil, 12
end

body[6] = function(buf, tree, flags) -- REPAIR_REQUEST
  if bit.band(flags, 0x10) ~= 0 then
    if not need(buf, tree, 8, 4, "REPAIR_REQUEST") then return end
    tree:add(f.request_id, buf(8, 2))
    local rt = tree:add(f.range_count, buf(10, 2))
    local n, off = buf(10, 2):uint(), 12
    local summary = string.format("%d ranges", n)
    if n == 0 then bad(rt, buf(10, 2), e_field, "Range Count 0") end
    if off + 4 * n > buf:len() then
      bad(rt, buf(10, 2), e_range_count, string.format("Range Count %d needs %d octets, %d follow", n, 4 * n, buf:len() - off))
      n = math.floor((buf:len() - off) / 4)
    end
    for _ = 1, n do
      tree:add(f.range_start, buf(off, 3)); tree:add(f.range_len, buf(off + 3, 1)); off = off + 4
    end
    if off + 4 * buf(10, 2):uint() > buf:len() then return summary end
    return summary, off
  end
  if not need(buf, tree, 8, 12, "REPAIR_REQUEST") then return end
  tree:add(f.config_id, buf(8, 1)); tree:add(f.scheme, buf(9, 1)); tree:add(f.k, buf(10, 1))
  tree:add(f.repairs_held, buf(11, 1)); tree:add(f.block_start_psn, buf(12, 3))
  tree:add(f.suggested_m, buf(15, 1)); tree:add(f.request_id, buf(16, 2))
  if buf(10, 1):uint() == 0 then bad(tree, buf(10, 1), e_field, "k 0 is out of range 1..255"); return end
  local w = words(buf(10, 1):uint())
  if not need(buf, tree, 20, w, "Lost Source Bitmap") then return end
  tree:add(f.lost_source_bitmap, buf(20, w))
  return string.format("PSN=%d r=%d M_s=%d", buf(12, 3):uint(), buf(11, 1):uint(), buf(15, 1):uint()), 20 + w
end

body[7] = function(buf, tree) -- LOSS_REPORT
  if not need(buf, tree, 8, 32, "LOSS_REPORT") then return end
  local fields = { f.interval_us, f.expected, f.received, f.restored, f.incomplete_blocks,
    f.ce_marked, f.repairs_received, f.repairs_ce_marked }
  for i, field in ipairs(fields) do tree:add(field, buf(8 + 4 * (i - 1), 4)) end
  return string.format("expected %d received %d", buf(12, 4):uint(), buf(16, 4):uint()), 40
end

body[8] = function(buf, tree) -- PATH_REPORT
  if not need(buf, tree, 8, 4, "PATH_REPORT") then return end
  tree:add(f.method, buf(8, 1))
  local et = tree:add(f.entry_count, buf(9, 1))
  tree:add(f.af, buf(10, 1))
  local count = buf(9, 1):uint()
  if count > 16 then bad(et, buf(9, 1), e_entries, string.format("Entry Count %d exceeds 16", count)) end
  local off = addresses(buf, tree, 12, buf(10, 1):uint())
  if not off or not need(buf, tree, off, 4, "Flow Label") then return end
  tree:add(f.flow_label, buf(off, 4)); off = off + 4
  for e = 1, count do
    if not need(buf, tree, off, 20, "Hop Entry " .. e) then return end
    local n = buf(off + 17, 1):uint()
    local fits = math.min(n, math.floor((buf:len() - off - 20) / 4))
    local hop = tree:add(crem, buf(off, 20 + 4 * fits), "Hop Entry " .. e)
    hop:add(f.node_id, buf(off, 4)); hop:add(f.marking_period, buf(off + 4, 4))
    hop:add(f.lost_count, buf(off + 8, 4)); hop:add(f.queue_delay_change, buf(off + 12, 4))
    hop:add(f.cause, buf(off + 16, 1))
    local pt = hop:add(f.psn_count, buf(off + 17, 1))
    if fits < n then
      bad(pt, buf(off + 17, 1), e_psn_count, string.format("PSN Count %d in hop entry %d needs %d octets, %d follow",
        n, e, 4 * n, buf:len() - off - 20))
    end
    off = off + 20
    for _ = 1, fits do
      hop:add(f.dropped_psn, buf(off + 1, 3)); off = off + 4
    end
    if fits < n then return end
  end
  return string.format("%d hop entries", count), off
end

body[9] = function(buf, tree) -- CLOSE
  if need(buf, tree, 8, 4, "CLOSE") then tree:add(f.reason, buf(8, 1)); return nil, 12 end
end

function crem.dissector(tvb, pinfo, root)
  -- All CREM messages have the CREM port as destination port (draft, CREM port): a datagram
  -- that has it only as its source is someone else's, for instance RoCEv2 on a path whose
  -- sockets are bound to the CREM port.
  if crem.prefs.port == 0 or pinfo.dst_port ~= crem.prefs.port then return 0 end
  pinfo.cols.protocol = "CREM"
  local tree = root:add(crem, tvb())
  if tvb:len() < 1 then
    bad(tree, nil, e_short, "Empty datagram")
    pinfo.cols.info = "CREM malformed: empty datagram"
    return tvb:len()
  end
  local version, typ = bit.rshift(tvb(0, 1):uint(), 4), bit.band(tvb(0, 1):uint(), 0x0F)
  tree:add(f.version, tvb(0, 1)); tree:add(f.type, tvb(0, 1))
  -- The domain keeps the CREM port for CREM, so whatever arrives on it is CREM: a Version or
  -- Type the draft does not know is shown as malformed (receivers discard it).
  if version ~= 1 then
    bad(tree, tvb(0, 1), e_version, string.format("Version %d (only 1 is defined)", version))
    tree:set_text("CREM, unknown Version " .. version)
    pinfo.cols.info = string.format("CREM malformed: Version %d", version)
    return tvb:len()
  end
  if types[typ] == nil then
    bad(tree, tvb(0, 1), e_type, string.format("Type %d (1 to 9 are defined)", typ))
    tree:set_text("CREM, unknown Type " .. typ)
    pinfo.cols.info = string.format("CREM malformed: Type %d", typ)
    return tvb:len()
  end
  tree:set_text("CREM " .. types[typ])
  if tvb:len() < 8 then
    bad(tree, nil, e_short, string.format("Datagram of %d octets ends inside the 8-octet header", tvb:len()))
    pinfo.cols.info = types[typ] .. " malformed: short header"
    return tvb:len()
  end
  local flags = tvb(1, 1):uint()
  local ft = tree:add(f.flags, tvb(1, 1))
  if typ == 1 then ft:add(f.retx, tvb(1, 1)); ft:add(f.last, tvb(1, 1)); ft:add(f.info, tvb(1, 1))
  elseif typ == 6 then ft:add(f.fallback, tvb(1, 1)); ft:add(f.ranges, tvb(1, 1))
  elseif typ == 8 then ft:add(f.truncated, tvb(1, 1)) end
  local lt = tree:add(f.length, tvb(2, 2))
  local length = tvb(2, 2):uint()
  -- The fields are read within the shorter of Length and the datagram.
  local buf = tvb
  if length ~= tvb:len() then
    bad(lt, tvb(2, 2), e_length, string.format("Length %d, datagram %d octets", length, tvb:len()))
    if length >= 8 and length < tvb:len() then buf = tvb(0, length):tvb() end
  end
  tree:add(f.flow_id, buf(4, 4))
  local flow = buf(4, 4):uint()
  if flow ~= 0 and (typ == 2 or typ == 8) then
    bad(tree, buf(4, 4), e_field, string.format("Flow ID %d in %s (must be 0)", flow, types[typ]))
  end
  local summary, stop = body[typ](buf, tree, flags)
  if stop and stop < buf:len() then
    bad(tree, buf(stop), e_trailing, string.format("%d octets after the fields", buf:len() - stop))
  end
  pinfo.cols.info = types[typ] .. " flow 0x" .. string.format("%08x", flow) .. (summary and (" " .. summary) or "")
  return tvb:len()
end

local registered = 0
function crem.prefs_changed()
  local udp = DissectorTable.get("udp.port")
  if registered ~= 0 then udp:remove(registered, crem) end
  registered = crem.prefs.port
  if registered ~= 0 then udp:add(registered, crem) end
end

-- T/C AETH (tc-aeth-draft; RULINGS T1-T3): the fragment after the AETH of an extended ACK.
--
-- Wireshark's InfiniBand dissector decodes RoCEv2 (UDP port 4791, or another port with
-- -d udp.port==N,infiniband or -o infiniband.rroce.port:N) but knows nothing of the fragment.
-- This postdissector finds, after it, every RoCEv2 BTH of a frame and decides by the opcode and
-- the UDP payload's length, as a receiver does (RULINGS T2): an RC ACKNOWLEDGE (17) whose UDP
-- payload is BTH 12 + AETH 4 + T/C AETH 32 + ICRC 4 = 52 octets, or an RC ATOMIC ACKNOWLEDGE
-- (18) of 60 (with the 8-octet Atomic ACK ETH after the fragment), carries a T/C AETH at the
-- 16th octet after the BTH. A plain ACK (20 or 28 octets) carries none; any other length is
-- marked malformed.

local tcaeth = Proto("tcaeth", "T/C AETH (Windowless Cumulative ACK Extension)")
local tf = tcaeth.fields
tf.segment_num = ProtoField.uint24("tcaeth.segment_num", "SegmentNum", base.DEC)
tf.last_finished_psn = ProtoField.uint24("tcaeth.last_finished_psn", "Last Finished PSN", base.DEC)
tf.seg_left = ProtoField.uint24("tcaeth.seg_left", "Seg Left", base.DEC)
tf.seg_right = ProtoField.uint24("tcaeth.seg_right", "Seg Right", base.DEC)
tf.unused = ProtoField.bytes("tcaeth.unused", "Unused Seg fields")
tf.reserved = ProtoField.bytes("tcaeth.reserved", "Reserved")
tf.padding = ProtoField.bytes("tcaeth.padding", "Padding")
tf.lost_first = ProtoField.uint24("tcaeth.lost_first", "First lost PSN", base.DEC)
tf.lost_last = ProtoField.uint24("tcaeth.lost_last", "Last lost PSN", base.DEC)
tf.lost_count = ProtoField.uint32("tcaeth.lost_count", "Lost PSNs in the gap", base.DEC)
tf.lost_total = ProtoField.uint32("tcaeth.lost_total", "PSNs in the gaps", base.DEC)
tf.atomic_orig = ProtoField.uint64("tcaeth.atomic_original_data", "Atomic ACK ETH Original Remote Data", base.HEX)
tf.malformed = ProtoField.string("tcaeth.malformed", "Malformed")

local te_segnum = ProtoExpert.new("tcaeth.bad_segment_num", "SegmentNum outside 1..4", expert.group.MALFORMED, expert.severity.ERROR)
local te_order = ProtoExpert.new("tcaeth.bad_order", "Seg fields not ascending and disjoint (RULINGS T3)", expert.group.MALFORMED, expert.severity.ERROR)
local te_length = ProtoExpert.new("tcaeth.ack_length", "ACK length neither plain nor extended (RULINGS T2)", expert.group.MALFORMED, expert.severity.ERROR)
local te_short = ProtoExpert.new("tcaeth.truncated", "Capture ends inside the T/C AETH", expert.group.MALFORMED, expert.severity.ERROR)
local te_nonzero = ProtoExpert.new("tcaeth.nonzero", "Unused, reserved or padding octets not zero (RULINGS T1)", expert.group.PROTOCOL, expert.severity.WARN)
local te_psn = ProtoExpert.new("tcaeth.psn_mismatch", "BTH PSN differs from Last Finished PSN (RULINGS T2)", expert.group.PROTOCOL, expert.severity.WARN)
local te_lost = ProtoExpert.new("tcaeth.lost", "Gap between reported blocks: lost by the draft's rule", expert.group.SEQUENCE, expert.severity.NOTE)
tcaeth.experts = { te_segnum, te_order, te_length, te_short, te_nonzero, te_psn, te_lost }

local bth_field = Field.new("infiniband.bth")
local udp_field = Field.new("udp")

local MASK, HALF = 0xFFFFFF, 0x800000
-- forward is the serial distance from p to q; before(p, q) that p precedes q.
local function forward(p, q) return bit.band(q - p, MASK) end
local function before(p, q) local d = forward(p, q); return d ~= 0 and d < HALF end

local function tbad(tree, range, e, text)
  local it = tree:add(tf.malformed, range, text)
  it:set_generated()
  it:add_proto_expert_info(e, text)
end

local function zero(range)
  for i = 0, range:len() - 1 do
    if range(i, 1):uint() ~= 0 then return false end
  end
  return true
end

-- fragment decodes the 32 octets at off of buf into tree; bthpsn is the ACK's BTH PSN.
local function fragment(buf, off, tree, bthpsn)
  local t = tree:add(tcaeth, buf(off, 32))
  local segitem = t:add(tf.segment_num, buf(off, 3))
  local n, lf = buf(off, 3):uint(), buf(off + 3, 3):uint()
  local lfitem = t:add(tf.last_finished_psn, buf(off + 3, 3))
  if lf ~= bthpsn then
    tbad(lfitem, buf(off + 3, 3), te_psn, string.format("Last Finished PSN %d, BTH PSN %d", lf, bthpsn))
  end
  if n < 1 or n > 4 then
    tbad(segitem, buf(off, 3), te_segnum, string.format("SegmentNum %d is outside 1..4", n))
    t:set_text(string.format("T/C AETH, SegmentNum %d (malformed)", n))
    return
  end
  local used = n - 1
  local prev, gaps, total, ok = lf, {}, 0, true
  for i = 1, used do
    local o = off + 6 * i
    local l, r = buf(o, 3):uint(), buf(o + 3, 3):uint()
    local st = t:add(tcaeth, buf(o, 6), string.format("Seg%d: %d-%d", i, l, r))
    st:add(tf.seg_left, buf(o, 3)); st:add(tf.seg_right, buf(o + 3, 3))
    if not before(prev, l) then
      tbad(st, buf(o, 3), te_order, string.format("Seg%d Left %d is not after %d", i, l, prev)); ok = false
    elseif before(r, l) then
      tbad(st, buf(o + 3, 3), te_order, string.format("Seg%d Right %d is before its Left %d", i, r, l)); ok = false
    elseif not before(lf, r) then
      tbad(st, buf(o + 3, 3), te_order, string.format("Seg%d Right %d wraps past Last Finished PSN %d", i, r, lf)); ok = false
    else
      -- The draft's lost range i: the PSNs strictly between the previous block and this one.
      local cnt = forward(prev, l) - 1
      if cnt > 0 then
        gaps[#gaps + 1] = { bit.band(prev + 1, MASK), bit.band(l - 1, MASK), cnt, o }
        total = total + cnt
      end
    end
    prev = r
  end
  if used < 3 then
    local u = buf(off + 6 + 6 * used, 6 * (3 - used))
    local ut = t:add(tf.unused, u)
    if not zero(u) then tbad(ut, u, te_nonzero, "Unused Seg fields are not zero") end
  end
  local rt = t:add(tf.reserved, buf(off + 24, 6))
  if not zero(buf(off + 24, 6)) then tbad(rt, buf(off + 24, 6), te_nonzero, "Reserved fields are not zero") end
  local pt = t:add(tf.padding, buf(off + 30, 2))
  if not zero(buf(off + 30, 2)) then tbad(pt, buf(off + 30, 2), te_nonzero, "Padding is not zero") end
  if ok then
    for _, g in ipairs(gaps) do
      local text = string.format("Gap %d-%d (%d PSNs), lost by the draft's rule", g[1], g[2], g[3])
      local lt = t:add(tcaeth, buf(g[4], 3), text)
      lt:set_generated()
      lt:add(tf.lost_first, g[1]):set_generated()
      lt:add(tf.lost_last, g[2]):set_generated()
      lt:add(tf.lost_count, g[3]):set_generated()
      lt:add_proto_expert_info(te_lost)
    end
    t:add(tf.lost_total, total):set_generated()
  end
  local summary = string.format("T/C AETH LF=%d", lf)
  for i = 1, used do
    summary = summary .. string.format(" [%d-%d]", buf(off + 6 * i, 3):uint(), buf(off + 6 * i + 3, 3):uint())
  end
  t:set_text(summary)
  return summary
end

function tcaeth.dissector(buf, pinfo, root)
  local bths = { bth_field() }
  if #bths == 0 then return end
  local udps = { udp_field() }
  for _, bth in ipairs(bths) do
    local op = bth.range(0, 1):uint()
    local boff = bth.offset
    -- Offsets count in the BTH's data source: go on only when it is this frame's octets.
    if (op == 17 or op == 18) and buf:len() >= boff + 12 and buf(boff, 12):bytes() == bth.range:bytes() then
      -- The UDP header right before this BTH gives the payload's length.
      for _, u in ipairs(udps) do
        if u.source == bth.source and u.offset + 8 == boff then
          local paylen = buf(u.offset + 4, 2):uint() - 8
          local ext = (op == 17) and 52 or 60
          local plain = (op == 17) and 20 or 28
          if paylen == ext then
            if buf:len() < boff + 48 then
              local t = root:add(tcaeth, buf(boff))
              tbad(t, buf(boff), te_short, string.format("Capture ends %d octets into the %d-octet ACK", buf:len() - boff, ext))
            else
              local summary = fragment(buf, boff + 16, root, bth.range(9, 3):uint())
              if op == 18 and buf:len() >= boff + 56 then
                root:add(tcaeth, buf(boff + 48, 8), "Atomic ACK ETH (after the T/C AETH)")
                  :add(tf.atomic_orig, buf(boff + 48, 8))
              end
              if summary then pinfo.cols.info:append(" " .. summary) end
            end
          elseif paylen ~= plain then
            local t = root:add(tcaeth, bth.range)
            tbad(t, bth.range, te_length, string.format("%s with a %d-octet UDP payload: plain is %d, extended %d",
              op == 17 and "ACKNOWLEDGE" or "ATOMIC ACKNOWLEDGE", paylen, plain, ext))
          end
        end
      end
    end
  end
end

register_postdissector(tcaeth)
