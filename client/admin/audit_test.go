package admin_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"lockcell/audit"
	"lockcell/client/admin"
)

// AuditRecord reads every field the trail stores (audit.Record), so a
// record served and printed with lockcell audit --json loses none: each
// field set, the stored line and the AuditRecord's JSON are the same.
func TestAuditRecordReadsEveryStoredField(t *testing.T) {
	var stored audit.Record
	v := reflect.ValueOf(&stored).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString(v.Type().Field(i).Name)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Uint64, reflect.Uint32:
			f.SetUint(uint64(i + 1))
		case reflect.Int64, reflect.Int:
			f.SetInt(int64(i + 1))
		default:
			t.Fatalf("audit.Record.%s is a %s: teach this test its value", v.Type().Field(i).Name, f.Kind())
		}
	}
	line, err := json.Marshal(&stored)
	if err != nil {
		t.Fatal(err)
	}
	var read admin.AuditRecord
	if err := json.Unmarshal(line, &read); err != nil {
		t.Fatal(err)
	}
	again, err := json.Marshal(&read)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(line) {
		t.Fatalf("an AuditRecord reads the stored line\n%s\nas\n%s", line, again)
	}
}
