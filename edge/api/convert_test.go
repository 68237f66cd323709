package api

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
)

// fill sets every field that JSON carries, at every depth, to a value that
// is not its zero, so that a field the conversion forgets shows.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Int32, reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // PEM data: not on the wire
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), n)
		}
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && v.Type().Field(i).Tag.Get("json") != "-" {
				fill(v.Field(i), n)
			}
		}
	}
}

// Every field of the model crosses the wire and comes back, under the JSON
// names the model has always had on it (an older npl-lbsync or npl-edge on
// the other end reads the same bytes).
func TestConvert_everyFieldOfTheModelCrossesTheWire(t *testing.T) {
	var lb lbmodel.LoadBalancer
	n := 0
	fill(reflect.ValueOf(&lb).Elem(), &n)

	wire, err := json.Marshal(FromModel(&lb))
	if err != nil {
		t.Fatal(err)
	}
	modelJSON, _ := json.Marshal(&lb)
	if string(wire) != string(modelJSON) {
		t.Errorf("the wire form differs from the model's JSON:\nwire  %s\nmodel %s", wire, modelJSON)
	}
	var back LoadBalancer
	if err := json.Unmarshal(wire, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&lb, back.Model()); diff != "" {
		t.Errorf("model -> wire -> model (-sent +received):\n%s", diff)
	}
}

func TestConvert_keepsNilAndEmptyApart(t *testing.T) {
	lb := &lbmodel.LoadBalancer{Name: "c1--ns-a", Listeners: []lbmodel.Listener{
		{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "p", Members: []lbmodel.Member{}}}}}
	got, _ := json.Marshal(FromModel(lb))
	want, _ := json.Marshal(lb)
	if string(got) != string(want) {
		t.Errorf("wire %s, model %s", got, want)
	}
	if m := FromModel(lb).Model(); m.Listeners[0].Pool.Members == nil || m.VIPs != nil {
		t.Errorf("nil and empty swapped: %+v", m)
	}
}
