// Package dissector ships crem.lua, a Wireshark dissector for the nine CREM messages, and the
// tests that check it against the project's own encoder through tshark.
//
// Use it with Wireshark or tshark, giving the domain's CREM port (the draft assigns none):
//
//	tshark -X lua_script:dissector/crem.lua -o crem.port:50000 -r capture.pcap -V
//
// or copy crem.lua into Wireshark's personal plugins folder and set the port under
// Preferences > Protocols > CREM.
package dissector
